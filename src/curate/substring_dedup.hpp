// Substring deduplication (Lee et al. 2022, "Deduplicating Training Data Makes Language Models
// Better"): over the words of every document (maximal runs of non-space bytes, compared
// exactly), in order, each run of at least `min_words` words that already occurred earlier is
// removed from the later document; the first occurrence stays. Found with a suffix array of the
// word ids (documents separated by symbols that occur once, so no match crosses documents):
// every group of suffixes sharing their first min_words words marks that span in each member
// but the earliest. Holds the word ids in memory (about 20 bytes per word while it runs).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace syslm::curate {

class SubstringDedup {
public:
    explicit SubstringDedup(int min_words);
    void add(int64_t doc, std::string_view text);  // documents in increasing id order
    void run();
    // doc's text without its removed spans (each with the spaces after it; at the end, those
    // before it); the text itself when it has none or was not added.
    std::string apply(int64_t doc, std::string_view text) const;
    int64_t removed_words() const { return removed_words_; }

private:
    int min_words_;
    std::unordered_map<std::string, int32_t> vocab_;
    std::vector<int32_t> words_;    // word ids; after each document a separator -1, -2, ...
    std::vector<uint8_t> removed_;  // per position of words_
    std::unordered_map<int64_t, std::pair<size_t, size_t>> docs_;  // doc -> [first, end) in words_
    int64_t removed_words_ = 0;
};

}  // namespace syslm::curate
