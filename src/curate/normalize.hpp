// What duplicate detection compares (as datatrove and text-dedup normalize): ASCII letters
// case-folded, ASCII punctuation, digits and control characters made spaces, runs of spaces
// collapsed, the ends trimmed; bytes of other UTF-8 characters kept as they are. And the 64-bit
// hash of such text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace syslm::curate {

std::string normalize_text(std::string_view s);
// The words of normalized text (views into it).
std::vector<std::string_view> split_words(std::string_view normalized);
// ASCII whitespace (the C locale's isspace).
inline bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
// [begin, end) byte ranges of the words of raw text: maximal runs of non-space bytes.
std::vector<std::pair<size_t, size_t>> word_spans(std::string_view text);
// A 64-bit hash of bytes (multiply-xorshift over 8-byte words, splitmix64's finalizer).
uint64_t hash_bytes(std::string_view s, uint64_t seed);

}  // namespace syslm::curate
