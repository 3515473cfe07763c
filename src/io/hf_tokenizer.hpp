// Hugging Face tokenizer.json (+ tokenizer_config.json, config.json, chat_template.jinja) ->
// the `tokenizer.*` GGUF keys llama.cpp reads.
//
// Two families are recognised from tokenizer.json itself:
//   - byte-level BPE (model BPE without byte_fallback, a ByteLevel pre-tokenizer):
//     tokenizer.ggml.model "gpt2" with tokens, token_type and merges, and tokenizer.ggml.pre
//     identified from the pre-tokenizer's Split regexes / Digits / Punctuation / ByteLevel steps
//     (llama.cpp hashes a tokenization instead; both name the same llama.cpp pre-tokenizer).
//     An unknown pre-tokenizer is an Error unless the caller names one (`--pre`).
//   - SentencePiece-derived (BPE with byte_fallback and a '▁' Metaspace/Replace normalisation,
//     or Unigram): tokenizer.ggml.model "llama" with tokens, scores and token_type. For BPE the
//     scores make llama.cpp's SPM bigram algorithm follow the merge order: a token produced by
//     merge rank r scores -r; other normal tokens score below every merge; added tokens -1000.
//
// Token types follow llama.cpp: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused
// (padding up to config.json's vocab_size, named "[PAD<id>]"), 6 byte (<0xXX>).
// Special ids come from tokenizer_config.json's *_token entries (else config.json's *_token_id);
// add_bos/add_eos from tokenizer_config.json or, when it says nothing (transformers >= 5), from
// the TemplateProcessing post-processor, so the flags state what HF actually does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/gguf.hpp"

namespace syslm::io {

struct HFTokenizerFiles {
    std::string tokenizer_json;         // required
    std::string tokenizer_config_json;  // "" when absent
    std::string config_json;            // "" when absent
    std::string chat_template;          // chat_template.jinja, "" when absent
    std::string name;                   // the model folder, for messages
};

struct HFVocab {
    std::string model;  // tokenizer.ggml.model: "gpt2" or "llama"
    std::string pre;    // tokenizer.ggml.pre
    size_t n_tokens = 0;
    std::vector<std::pair<std::string, GGUFValue>> kv;  // every tokenizer.* key, in order
};

// `n_vocab` is config.json's vocab_size (the embedding rows); 0 uses the tokenizer's own size.
// `pre_override` replaces the pre-tokenizer identification for byte-level BPE.
HFVocab convert_hf_tokenizer(const HFTokenizerFiles& files, int64_t n_vocab,
                             const std::string& pre_override = "");
HFVocab read_hf_tokenizer(const std::string& model_dir, int64_t n_vocab,
                          const std::string& pre_override = "");

// The llama.cpp pre-tokenizer name for a tokenizer.json "pre_tokenizer" value (JSON text), or
// "" when it is not one llama.cpp implements. `ignore_merges` is the BPE model's flag (Llama 3
// sets it; otherwise-identical cl100k-style tokenizers do not).
std::string identify_bpe_pre(std::string_view pre_tokenizer_json, bool ignore_merges);

// Every pre-tokenizer name llama.cpp accepts for tokenizer.ggml.pre (for --pre validation).
const std::vector<std::string_view>& known_bpe_pre_names();

}  // namespace syslm::io
