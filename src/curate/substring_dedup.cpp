#include "curate/substring_dedup.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "curate/normalize.hpp"
#include "curate/suffix_array.hpp"

namespace syslm::curate {

SubstringDedup::SubstringDedup(int min_words) : min_words_(min_words) {
    SYSLM_CHECK(min_words >= 1, "substring dedup: --substring-words must be at least 1");
}

void SubstringDedup::add(int64_t doc, std::string_view text) {
    const size_t first = words_.size();
    for (const auto& [b, e] : word_spans(text)) {
        const auto [it, added] =
            vocab_.emplace(std::string(text.substr(b, e - b)), static_cast<int32_t>(vocab_.size()));
        words_.push_back(it->second);
    }
    docs_[doc] = {first, words_.size()};
    words_.push_back(-1 - static_cast<int32_t>(docs_.size() - 1));
}

void SubstringDedup::run() {
    const auto vocab = static_cast<int32_t>(vocab_.size());
    std::vector<int32_t> s = words_;
    for (int32_t& w : s)
        if (w < 0) w = vocab + (-1 - w);  // separators: each its own symbol, after the words
    const int32_t alphabet = vocab + static_cast<int32_t>(docs_.size());
    const std::vector<int32_t> sa = suffix_array(s, alphabet);
    const std::vector<int32_t> lcp = lcp_array(s, sa);
    removed_.assign(s.size(), 0);
    const size_t n = sa.size(), m = static_cast<size_t>(min_words_);
    // Runs sa[g .. k) whose neighbours share >= m words: one m-word span, several places.
    for (size_t g = 0; g < n;) {
        size_t k = g + 1;
        while (k < n && lcp[k] >= min_words_) ++k;
        if (k - g >= 2) {
            const int32_t first = *std::min_element(sa.begin() + g, sa.begin() + k);
            for (size_t j = g; j < k; ++j)
                if (sa[j] != first) std::fill_n(removed_.begin() + sa[j], m, uint8_t{1});
        }
        g = k;
    }
    removed_words_ = std::count(removed_.begin(), removed_.end(), uint8_t{1});
    vocab_.clear();
}

std::string SubstringDedup::apply(int64_t doc, std::string_view text) const {
    const auto it = docs_.find(doc);
    if (it == docs_.end() || removed_.empty()) return std::string(text);
    const auto spans = word_spans(text);
    const size_t first = it->second.first;
    SYSLM_CHECK(spans.size() == it->second.second - first, "substring dedup: document ", doc,
                " changed between passes");
    std::string out;
    size_t from = 0;  // the next byte of text to copy
    for (size_t w = 0; w < spans.size();) {
        if (!removed_[first + w]) {
            ++w;
            continue;
        }
        size_t e = w;
        while (e < spans.size() && removed_[first + e]) ++e;
        // cut the run and the spaces after it (at the end of the text, the spaces before it)
        const size_t cut_begin = e == spans.size() && w > 0 ? spans[w - 1].second : spans[w].first;
        const size_t cut_end = e == spans.size() ? text.size() : spans[e].first;
        out.append(text.substr(from, cut_begin - from));
        from = cut_end;
        w = e;
    }
    out.append(text.substr(from));
    return out;
}

}  // namespace syslm::curate
