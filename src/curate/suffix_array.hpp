// The suffix array of a sequence of integer symbols (prefix doubling with radix passes:
// O(n log n)) and its LCP array (Kasai et al.: O(n)), for substring deduplication.
#pragma once

#include <cstdint>
#include <vector>

namespace syslm::curate {

// sa[k] is the start of the k-th smallest suffix of s. Symbols are 0 .. alphabet - 1.
std::vector<int32_t> suffix_array(const std::vector<int32_t>& s, int32_t alphabet);
// lcp[k] = the length of the common prefix of suffixes sa[k - 1] and sa[k] (lcp[0] = 0).
std::vector<int32_t> lcp_array(const std::vector<int32_t>& s, const std::vector<int32_t>& sa);

}  // namespace syslm::curate
