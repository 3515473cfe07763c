// Splitting special tokens out of text before tokenization (llama.cpp's tokenizer_st_partition).
//
// Special tokens (CONTROL, USER_DEFINED, UNKNOWN types) are matched by their exact text, longest
// first: each one is cut out of every piece of raw text left by the longer ones. USER_DEFINED
// tokens are always split out (HF tokenizers' added tokens); CONTROL and UNKNOWN tokens only when
// `parse_special` is set, otherwise their text is tokenized like any other text.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.hpp"

namespace syslm::tokenizer {

struct Fragment {
    int32_t token = -1;     // a special token, or -1 for raw text
    std::string_view text;  // the raw text (a view into the input) when token == -1
};

std::vector<Fragment> split_special_tokens(const Vocab& vocab, std::string_view text,
                                           bool parse_special);

}  // namespace syslm::tokenizer
