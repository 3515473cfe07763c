// SentencePiece-style tokenization (tokenizer.ggml.model = "llama"), as llama.cpp's
// llm_tokenizer_spm_session: the text (spaces already replaced by U+2581) is split into UTF-8
// characters, then the adjacent pair whose concatenation is the vocabulary token with the highest
// score is merged repeatedly (ties: leftmost first). A final symbol that is not a token is
// emitted as byte tokens <0xXX> (byte fallback), or the unknown token when the vocabulary has no
// byte tokens.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.hpp"

namespace syslm::tokenizer {

// `text` must already have its spaces replaced by U+2581.
void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

// Every pair of adjacent characters (split as spm_tokenize splits text) inside some token, as
// keys of spm_pair_key. Between two characters that no token holds side by side no merge can
// ever happen, so spm_tokenize cuts the text there and merges the pieces separately, with the
// same result as over the whole text, and looks repeated pieces up instead of merging them again.
std::vector<uint64_t> spm_adjacent_pairs(const Vocab& vocab);  // sorted, unique
uint64_t spm_pair_key(std::string_view left, std::string_view right);

}  // namespace syslm::tokenizer
