// LoRA adapters in llama.cpp's adapter GGUF (general.type = "adapter", adapter.type = "lora",
// adapter.lora.alpha; for a base tensor "<name>", "<name>.lora_a" with ggml shape [n_in, r] and
// "<name>.lora_b" with [r, n_out]), applied as y = W x + s (B (A x)) with s = scale x alpha / r
// (scale alone when alpha is 0), as llama.cpp's --lora / --lora-scaled do. An adapter is bound to
// one base model: every pair is checked against the base tensor it adapts.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.hpp"
#include "model/weights.hpp"

namespace syslm::model {

class Model;

// The matrices an adapter may adapt (the dense blocks' projections; experts, embeddings and the
// output head are refused at load).
enum class LoraTarget { Q, K, V, QKV, O, Gate, Up, Down, Count };
inline constexpr size_t kLoraTargets = static_cast<size_t>(LoraTarget::Count);
const char* lora_target_name(LoraTarget t);  // "attn_q", ..., "ffn_down"
// "blk.<il>.<target>.weight" -> il and target (false for any other name).
bool lora_block_target(const std::string& name, int& il, LoraTarget& target);

// An adapter file's pairs, read for a base of architecture `arch`: the file is checked to be a
// LoRA adapter of that architecture, every .lora_a paired with a 2-D .lora_b of the same rank,
// in types syslm reads; alpha gets adapter.lora.alpha. Shapes against the base are the caller's.
struct AdapterPair {
    std::string name;  // the base tensor's
    const io::GGUFTensor *a, *b;
};
std::vector<AdapterPair> read_adapter_pairs(const io::GGUFFile& f, const std::string& arch,
                                            float& alpha);

class LoraAdapter {
public:
    // Throws Error naming the file (and the tensor) for a file that is not a LoRA adapter of this
    // base: another type or architecture, an unpaired or misshapen tensor, a target syslm does
    // not adapt, ranks that differ within a pair.
    LoraAdapter(const std::string& path, const Model& base);

    // A pair in the kernel's layouts: f16 when the file holds the pair in f16 (kept exact, and
    // decode reads half the bytes), else f32 whatever the file's type (adapters are small).
    struct Pair {
        DType type = DType::F32;  // of a and bt
        std::vector<uint8_t> a;   // A: r rows of n_in
        std::vector<uint8_t> bt;  // B transposed: r rows of n_out (the row kernel's order)
        int r = 0;
        int64_t n_in = 0, n_out = 0;
        float scale = 1;  // alpha / r, or 1 when the file's alpha is 0
        std::vector<float> floats(const std::vector<uint8_t>& m) const;  // a or bt as f32
    };
    // nullptr where the adapter leaves that matrix alone.
    const Pair* pair(int il, LoraTarget t) const {
        const Pair& p = layers_[static_cast<size_t>(il)][static_cast<size_t>(t)];
        return p.r ? &p : nullptr;
    }
    const std::string& path() const { return path_; }
    float alpha() const { return alpha_; }
    int n_pairs() const { return n_pairs_; }

private:
    std::string path_;
    float alpha_ = 0;
    int n_pairs_ = 0;
    std::vector<std::array<Pair, kLoraTargets>> layers_;
};

// One adapter as a batch uses it: its scale (llama.cpp's --lora-scaled; 1 for --lora) and the
// batch rows it applies to (empty: all of them). Several may apply to the same rows; they add.
struct LoraUse {
    const LoraAdapter* adapter = nullptr;
    float scale = 1.0f;
    std::vector<int64_t> rows;
};

// w (the base matrix's n_out rows of n_in, as floats) += scale x the pair's s B A.
void add_lora_delta(const LoraAdapter::Pair& p, float scale, float* w);

// `syslm lora merge`: the base model's file with every adapted matrix replaced by W + s B A for
// each use (their rows are ignored), in the base tensor's own type (quantized types are
// dequantized, merged and quantized again), written atomically to `out`. Returns the number of
// matrices merged.
int merge_lora(const Model& base, const std::vector<LoraUse>& uses, const std::string& out);

}  // namespace syslm::model
