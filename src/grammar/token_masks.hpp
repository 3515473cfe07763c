// Which tokens a grammar state allows, without a scan of the vocabulary's strings per token:
// the vocabulary's byte strings form a trie (built once per vocabulary), and a state's mask is a
// walk of the trie that advances a copy of the state byte by byte and leaves every subtree whose
// state dies (the cost is the trie nodes on accepted prefixes, not V x length). Masks are cached
// by the state's key: a grammar's states repeat (inside a JSON string, after a comma), and a hit
// costs a lookup.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.hpp"

namespace syslm::grammar {

// A bit per token id: bit t of word t / 64.
using TokenMask = std::vector<uint64_t>;
inline bool allowed(const TokenMask& m, int32_t t) {
    return (m[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1;
}

class VocabTrie {
public:
    // pieces[t]: the bytes token t adds to the output; empty: never allowed by a grammar
    // (control tokens). end_tokens: allowed exactly where the grammar may end (EOS, EOT, ...).
    VocabTrie(const std::vector<std::string>& pieces, std::vector<int32_t> end_tokens);
    int32_t n_tokens() const { return n_tokens_; }

    // The mask of state m (computed, not cached).
    TokenMask mask(const Matcher& m) const;

private:
    struct Node {
        uint32_t first_child = 0, n_children = 0;  // in children_, sorted by byte
        uint32_t first_token = 0, n_tokens = 0;    // in tokens_: those ending here
    };
    void walk(uint32_t node, const Matcher& m, int depth, std::vector<Matcher>& scratch,
              TokenMask& out) const;

    int32_t n_tokens_;
    size_t max_len_ = 0;  // the longest piece's bytes: the walk's depth
    std::vector<Node> nodes_;
    std::vector<std::pair<uint8_t, uint32_t>> children_;  // (byte, node)
    std::vector<int32_t> tokens_;
    std::vector<int32_t> end_tokens_;
};

// VocabTrie::mask with an LRU cache of masks by grammar and state key.
class MaskCache {
public:
    explicit MaskCache(const VocabTrie& trie, size_t capacity = 4096)
        : trie_(trie), capacity_(capacity) {}
    const TokenMask& mask(const Matcher& m);
    int64_t hits() const { return hits_; }
    int64_t misses() const { return misses_; }

private:
    struct Entry {
        uint64_t hash, grammar;
        std::vector<uint32_t> key;
        TokenMask mask;
    };
    const VocabTrie& trie_;
    size_t capacity_;
    std::list<Entry> lru_;  // most recently used first
    std::unordered_multimap<uint64_t, std::list<Entry>::iterator> index_;
    int64_t hits_ = 0, misses_ = 0;
};

}  // namespace syslm::grammar
