// The trainable parameters of a model in FP32 (the master weights), with their gradients, in two
// arenas of the same layout: one tensor per GGUF tensor, under llama.cpp's names, so a trained
// model is written back as the GGUF that `syslm generate` and llama.cpp load. Tensors that are
// not trained (rope_freqs: constants of the position encoding) stay out.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf.hpp"
#include "parallel/communicator.hpp"

namespace syslm::train {

struct Param {
    std::string name;
    std::vector<int64_t> ne;  // GGML order
    size_t offset;            // in floats, into values / grads
    int64_t numel;
    // Trained with the model but not part of it (distillation's hidden-state projections): kept
    // out of the GGUF files, saved in checkpoint states.
    bool auxiliary = false;
    // Tensor parallelism: the GGML dimension this rank holds a slice of (0: columns of every row,
    // 1: rows; -1: the whole tensor) and that dimension's full length.
    int slice_dim = -1;
    int64_t full_len = 0;
};

// Which part of a tensor a tensor-parallel rank keeps: [begin, end) along GGML dimension `dim`.
struct TensorSlice {
    int dim = -1;  // -1: the whole tensor
    int64_t begin = 0, end = 0;
    bool skip = false;  // not on this rank at all (pipeline parallelism: another stage's)
};
using Slicer = std::function<TensorSlice(const std::string& name, const std::vector<int64_t>& ne)>;

class ParamStore {
public:
    // Every tensor of the file but the constants, converted to f32 (any stored type); with a
    // slicer, only each tensor's slice (tensor parallelism).
    static ParamStore from_gguf(const io::GGUFFile& file, const Slicer& slicer = {});
    // Tensor parallelism: the whole tensors, every sliced one gathered from the group's ranks
    // (equal slices in rank order); values only. Every rank of the group calls it.
    ParamStore gathered(parallel::Communicator& group) const;
    // Pipeline parallelism: every tensor of `file` (but the constants), each from the stage that
    // holds it, on the group's rank 0 (the others get an empty store). Every stage calls it.
    ParamStore gathered_stages(parallel::Communicator& stages, const io::GGUFFile& file) const;
    // The same layout with other values (an optimizer moment), to gather it like the weights.
    ParamStore with_values(const std::vector<float>& values) const;
    // This store's part (its tensors, its tensor-parallel slices as rank `tp_rank` of the cut)
    // of an array laid out as the whole model of `file` would be (from_gguf without a slicer).
    std::vector<float> local_part(const std::vector<float>& whole, const io::GGUFFile& file,
                                  int tp_rank) const;

    const std::vector<Param>& params() const { return params_; }
    const Param* find(const std::string& name) const;
    float* value(const std::string& name);  // nullptr when absent
    float* grad(const std::string& name);
    float* values() { return values_.data(); }
    const float* values() const { return values_.data(); }
    float* grads() { return grads_.data(); }
    size_t size() const { return values_.size(); }  // floats
    void zero_grads();
    // Makes `alias` the same parameter as `target` (same shape): it leaves the trained set and is
    // written as a copy of `target`. For GPT-2 files, which store the tied output matrix twice.
    void tie(const std::string& alias, const std::string& target);
    // Appends a parameter with these initial values (gradient zero): an auxiliary one, or one of
    // the model (LoRA's A and B in a store of their own). Reallocates: pointers from value() /
    // grad() taken before are invalid afterwards.
    void add(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& init,
             bool auxiliary);
    size_t auxiliary_size() const;  // floats of the auxiliary parameters

    // Writes the values (or the gradients) of the model's parameters (not the auxiliary ones) as
    // F32 tensors with the given metadata, plus, when
    // `constants` is given, its tensors that are not parameters (rope_freqs), unchanged.
    void write_gguf(const std::string& path,
                    const std::vector<std::pair<std::string, io::GGUFValue>>& metadata,
                    bool gradients = false, const io::GGUFFile* constants = nullptr) const;

private:
    std::vector<Param> params_;
    std::vector<std::pair<std::string, std::string>> ties_;  // (alias, target)
    std::vector<float> values_, grads_;
};

}  // namespace syslm::train
