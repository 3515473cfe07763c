#include "curate/suffix_array.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace syslm::curate {

namespace {

// One stable counting-sort pass of `order` by key(i) in [0, keys).
template <class Key>
void counting_sort(std::vector<int32_t>& order, std::vector<int32_t>& tmp, int32_t keys, Key key) {
    std::vector<int32_t> count(static_cast<size_t>(keys) + 1, 0);
    for (const int32_t i : order) ++count[static_cast<size_t>(key(i)) + 1];
    for (size_t k = 1; k < count.size(); ++k) count[k] += count[k - 1];
    tmp.resize(order.size());
    for (const int32_t i : order)
        tmp[static_cast<size_t>(count[static_cast<size_t>(key(i))]++)] = i;
    order.swap(tmp);
}

}  // namespace

std::vector<int32_t> suffix_array(const std::vector<int32_t>& s, int32_t alphabet) {
    SYSLM_CHECK(s.size() < (size_t{1} << 31) - 1, "suffix array: ", s.size(),
                " symbols is over the 32-bit index");
    const auto n = static_cast<int32_t>(s.size());
    std::vector<int32_t> sa(static_cast<size_t>(n)), rank(s.begin(), s.end()), tmp, next(sa.size());
    for (int32_t i = 0; i < n; ++i) sa[static_cast<size_t>(i)] = i;
    counting_sort(sa, tmp, alphabet, [&](int32_t i) { return rank[static_cast<size_t>(i)]; });
    // ranks of the first symbol
    int32_t classes = 0;
    for (int32_t k = 0; k < n; ++k) {
        if (k > 0 && s[static_cast<size_t>(sa[k])] != s[static_cast<size_t>(sa[k - 1])]) ++classes;
        next[static_cast<size_t>(sa[k])] = classes;
    }
    rank.swap(next);
    ++classes;
    for (int32_t len = 1; classes < n && len < n; len *= 2) {
        // sort by (rank[i], rank[i + len]) (-1 past the end): the second key, then the first
        auto second = [&](int32_t i) {
            return i + len < n ? rank[static_cast<size_t>(i + len)] + 1 : 0;
        };
        counting_sort(sa, tmp, classes + 1, second);
        counting_sort(sa, tmp, classes, [&](int32_t i) { return rank[static_cast<size_t>(i)]; });
        int32_t c = 0;
        for (int32_t k = 0; k < n; ++k) {
            if (k > 0 &&
                (rank[static_cast<size_t>(sa[k])] != rank[static_cast<size_t>(sa[k - 1])] ||
                 second(sa[k]) != second(sa[k - 1])))
                ++c;
            next[static_cast<size_t>(sa[k])] = c;
        }
        rank.swap(next);
        classes = c + 1;
    }
    return sa;
}

std::vector<int32_t> lcp_array(const std::vector<int32_t>& s, const std::vector<int32_t>& sa) {
    const size_t n = s.size();
    std::vector<int32_t> rank(n), lcp(n, 0);
    for (size_t k = 0; k < n; ++k) rank[static_cast<size_t>(sa[k])] = static_cast<int32_t>(k);
    int32_t h = 0;
    for (size_t i = 0; i < n; ++i) {
        const auto r = static_cast<size_t>(rank[i]);
        if (r == 0) {
            h = 0;
            continue;
        }
        const auto j = static_cast<size_t>(sa[r - 1]);
        while (i + h < n && j + h < n && s[i + h] == s[j + h]) ++h;
        lcp[r] = h;
        if (h > 0) --h;
    }
    return lcp;
}

}  // namespace syslm::curate
