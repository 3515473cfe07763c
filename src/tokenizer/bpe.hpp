// Byte-level BPE merges (tokenizer.ggml.model = "gpt2").
//
// A pre-tokenized word is mapped byte by byte to GPT-2's printable alphabet; then the adjacent
// pair with the lowest merge rank is merged repeatedly (ties: leftmost first) until no pair has a
// rank, as llama.cpp's llm_tokenizer_bpe_session and HF tokenizers' BPE do. Each final symbol is
// looked up in the vocabulary.
//
// Merges are strings, but every string that takes part in one is interned once at load time, so
// the merge loop compares integer ids and looks up (left id, right id) pairs in a hash table.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.hpp"

namespace syslm::tokenizer {

class BpeMerges {
public:
    // `merges` are "left right" strings by rank; throws Error naming vocab.source on a bad one.
    BpeMerges(const Vocab& vocab, const std::vector<std::string>& merges);

    // Appends the ids of one word (raw bytes, before the byte-level mapping).
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

    size_t n_merges() const { return pair_.size(); }

private:
    struct Merge {
        int32_t rank;
        uint32_t result;  // interned id of left+right
    };
    static uint64_t key(uint32_t left, uint32_t right) {
        return (static_cast<uint64_t>(left) << 32) | right;
    }

    std::unordered_map<uint64_t, Merge> pair_;
    std::vector<int32_t> token_of_;          // interned id -> token id, or -1
    std::array<uint32_t, 256> byte_symbol_;  // byte -> interned id of its byte-level character
    // Fallback for a symbol that is not a token: llama.cpp emits the tokens of the single bytes
    // of its byte-level text that exist as one-byte tokens.
    std::vector<std::string> symbol_text_;  // interned id -> byte-level text
    std::array<int32_t, 256> one_byte_token_;
};

}  // namespace syslm::tokenizer
