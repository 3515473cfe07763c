// What duplicate detection compares (as datatrove and text-dedup normalize): ASCII letters
// case-folded, ASCII punctuation, digits and control characters made spaces, runs of spaces
// collapsed, the ends trimmed; bytes of other UTF-8 characters kept as they are. And the 64-bit
// hash of such text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace syslm::curate {

std::string normalize_text(std::string_view s);
// The words of normalized text (views into it).
std::vector<std::string_view> split_words(std::string_view normalized);
// A 64-bit hash of bytes (multiply-xorshift over 8-byte words, splitmix64's finalizer).
uint64_t hash_bytes(std::string_view s, uint64_t seed);

}  // namespace syslm::curate
