// A PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) -> llama.cpp's
// adapter GGUF, as its convert_lora_to_gguf.py writes it: general.type "adapter", adapter.type
// "lora", adapter.lora.alpha, and for each adapted base tensor "<gguf name>.lora_a" (ggml
// [n_in, r]) and ".lora_b" ([r, n_out]) under the base's GGUF names. The base model's Hugging
// Face folder gives the names and the row transforms: B's rows are permuted or regrouped as the
// base weight's rows are (llama's Q/K RoPE layout, BLOOM's fused QKV); A is unchanged. rsLoRA's
// scale alpha / sqrt(r) is written as alpha x sqrt(r) (the file's scale is alpha / r).
// DoRA, trained biases, modules_to_save and adapters on embeddings, the head or experts are
// refused, naming what.
#pragma once

#include <string>

#include "core/dtype.hpp"

namespace syslm::io {

struct HFLoraConvertOptions {
    std::string adapter_dir;      // adapter_config.json, adapter_model.safetensors
    std::string base_dir;         // the base model's config.json and safetensors
    std::string output;           // .gguf path
    DType out_type = DType::F32;  // F32, F16 or BF16
};

struct HFLoraConvertResult {
    std::string arch;
    int rank = 0;
    float alpha = 0;  // as written
    size_t n_pairs = 0;
};

HFLoraConvertResult convert_hf_lora(const HFLoraConvertOptions& opt);

}  // namespace syslm::io
