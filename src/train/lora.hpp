// LoRA training (`syslm train --lora`): an adapter's A and B are the only trained parameters,
// named as in llama.cpp's adapter GGUF ("<base tensor>.lora_a" with GGML shape [n_in, r],
// ".lora_b" with [r, n_out]), so the trained store is written as the adapter file that `--lora`
// loads in syslm and llama.cpp. The base stays frozen in its file's types (TrainModel): with a
// quantized base this is QLoRA.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.hpp"
#include "model/lora.hpp"
#include "train/params.hpp"

namespace syslm::train {

struct LoraSpec {
    int rank = 0;                            // r of a new adapter
    float alpha = 8.0f;                      // PEFT's lora_alpha: the update is scaled by alpha / r
    std::vector<model::LoraTarget> targets;  // empty: every one the model has
    // An adapter GGUF to start from instead (its own rank, alpha and targets): a resumed run.
    std::string init;
    uint64_t seed = 1;
};

// "q,k,v,o,gate,up,down" (and "qkv" for fused attention) -> targets; throws Error naming an
// unknown or repeated one.
std::vector<model::LoraTarget> parse_lora_targets(const std::string& list);

// The adapter's parameters for `base`: from spec.init, checked against the base's shapes, or new
// for every target matrix of every block, A uniform in +-1/sqrt(n_in) (PEFT's Kaiming-uniform
// default) and B zero, so training starts from the base model's function. alpha receives the
// adapter's alpha. Throws Error for a target the model lacks in every block.
ParamStore lora_params(const io::GGUFFile& base, const LoraSpec& spec, float& alpha);

// The adapter file's metadata (general.type = adapter, adapter.type = lora, its alpha, the base's
// architecture).
std::vector<std::pair<std::string, io::GGUFValue>> lora_metadata(const io::GGUFFile& base,
                                                                 float alpha);

}  // namespace syslm::train
