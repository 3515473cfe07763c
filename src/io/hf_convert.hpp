// Hugging Face model folder -> GGUF file, as llama.cpp's convert_hf_to_gguf.py writes it:
// config.json -> hyper-parameters (hf_config), safetensors -> tensors with llama.cpp's names and
// layouts (hf_tensor_names), tokenizer.json -> tokenizer.* keys (hf_tokenizer).
//
// Output types: F32, F16 or BF16 for 2-D+ weights; 1-D tensors, norms, biases, the MoE router
// and position embeddings stay F32 as llama.cpp keeps them. general.file_type is 0 (all F32),
// 1 (mostly F16) or 32 (mostly BF16). The file is written atomically (temporary file + rename).
//
// Tensors whose bytes need no change (same type, no transform) are written straight from the
// mmap'd safetensors; the others are converted in memory first, so peak memory is about the size
// of the converted tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace syslm::io {

struct HFConvertOptions {
    std::string model_dir;        // config.json, *.safetensors, tokenizer.json
    std::string output;           // .gguf path
    DType out_type = DType::F32;  // F32, F16 or BF16
    std::string pre;              // tokenizer.ggml.pre override for byte-level BPE ("" = identify)
    std::string name;             // general.name ("" = the folder's name)
    bool vocab_only = false;      // metadata and tokenizer only, no tensors
    std::function<void(const std::string&)> log;  // one line per tensor; may be empty
};

struct HFConvertResult {
    std::string hf_arch;  // e.g. MistralForCausalLM
    std::string arch;     // general.architecture
    std::string tokenizer_model;
    std::string tokenizer_pre;
    size_t n_tokens = 0;
    size_t n_tensors = 0;
    uint64_t n_params = 0;
};

HFConvertResult convert_hf_model(const HFConvertOptions& opt);

// Floats as F32, F16 or BF16 bytes (round to nearest even).
std::vector<uint8_t> encode_floats(const std::vector<float>& x, DType t);

// general.file_type for an output type (llama_ftype: 0 ALL_F32, 1 MOSTLY_F16, 32 MOSTLY_BF16).
uint32_t hf_file_type(DType out_type);

}  // namespace syslm::io
