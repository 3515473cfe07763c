// WordNet 3.0 read from its database files (Debian's wordnet-base installs them under
// /usr/share/wordnet; format in wndb(5WN)): for each lemma, the synonyms of its most frequent
// sense, which is what synonym replacement needs.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace syslm::curate {

class WordNet {
public:
    // Reads DIR/index.{noun,verb,adj,adv} and DIR/data.*; throws Error naming a missing or
    // malformed file (and the Debian package that provides it).
    explicit WordNet(const std::string& dir);

    // `lemma`'s first synset in its part of speech with the most sense-tagged senses (ties: the
    // one with more senses, then noun, verb, adjective, adverb), as WordNet spells its words
    // (underscores as spaces): `spelled` is the lemma itself ("Waters" marks a proper noun),
    // `others` its synonyms. Null when the synset has no other word.
    struct Synset {
        std::string spelled;
        std::vector<std::string> others;
    };
    const Synset* synonyms(std::string_view lemma) const;  // lemma in lower case
    size_t size() const { return synonyms_.size(); }       // lemmas that have synonyms

private:
    std::unordered_map<std::string, Synset> synonyms_;
};

}  // namespace syslm::curate
