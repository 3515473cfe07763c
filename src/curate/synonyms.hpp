// Synonym replacement (EDA, Wei & Zou 2019) from WordNet: each eligible word of a document is
// replaced, with probability `rate`, by a synonym of its most frequent sense (curate/wordnet).
// Eligible: a run of ASCII letters of 3 or more, not touching a digit, apostrophe, hyphen or
// non-ASCII byte, not a function word, whose lower case is a WordNet lemma with synonyms (only
// exact lemmas: "cats" is left alone rather than re-inflected wrongly). Case is kept: "Cat" ->
// "True cat", "CAT" -> "TRUE CAT"; a word in lower case is never given a proper noun's sense
// or spelling.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "curate/augment.hpp"
#include "curate/wordnet.hpp"

namespace syslm::curate {

class SynonymReplacer {
public:
    SynonymReplacer(const WordNet& wordnet, double rate) : wordnet_(wordnet), rate_(rate) {}
    // The edits for one document; the draws depend only on (seed, the text), not on threads.
    // `eligible` counts the words that could have been replaced.
    std::vector<Edit> edits(std::string_view text, uint64_t seed, int64_t& eligible) const;

private:
    const WordNet& wordnet_;
    double rate_;
};

}  // namespace syslm::curate
