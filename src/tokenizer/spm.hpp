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

// True when no token has U+2581 after another character (as in LLaMA, Phi-3, Baichuan). Then no
// merge can cross the start of a U+2581 run, so text can be tokenized word by word with the same
// result, and repeated words are looked up instead of merged again.
bool spm_can_split_words(const Vocab& vocab);

}  // namespace syslm::tokenizer
