#include "grammar/token_masks.hpp"

#include <algorithm>
#include <map>

#include "core/error.hpp"

namespace syslm::grammar {

VocabTrie::VocabTrie(const std::vector<std::string>& pieces, std::vector<int32_t> end_tokens)
    : n_tokens_(static_cast<int32_t>(pieces.size())), end_tokens_(std::move(end_tokens)) {
    // A pointer trie first, then flattened breadth-first into arrays.
    struct Build {
        std::map<uint8_t, size_t> next;
        std::vector<int32_t> tokens;
    };
    std::vector<Build> b(1);
    for (size_t t = 0; t < pieces.size(); ++t) {
        if (pieces[t].empty()) continue;
        size_t node = 0;
        for (char c : pieces[t]) {
            const auto byte = static_cast<uint8_t>(c);
            auto it = b[node].next.find(byte);
            if (it == b[node].next.end()) {
                b.emplace_back();
                it = b[node].next.emplace(byte, b.size() - 1).first;
            }
            node = it->second;
        }
        b[node].tokens.push_back(static_cast<int32_t>(t));
        max_len_ = std::max(max_len_, pieces[t].size());
    }
    nodes_.resize(b.size());
    for (size_t n = 0; n < b.size(); ++n) {
        nodes_[n].first_child = static_cast<uint32_t>(children_.size());
        nodes_[n].n_children = static_cast<uint32_t>(b[n].next.size());
        for (const auto& [byte, child] : b[n].next)
            children_.emplace_back(byte, static_cast<uint32_t>(child));
        nodes_[n].first_token = static_cast<uint32_t>(tokens_.size());
        nodes_[n].n_tokens = static_cast<uint32_t>(b[n].tokens.size());
        tokens_.insert(tokens_.end(), b[n].tokens.begin(), b[n].tokens.end());
    }
    for (int32_t t : end_tokens_)
        SYSLM_CHECK(t >= 0 && t < n_tokens_, "grammar: end token ", t, " outside the vocabulary");
}

void VocabTrie::walk(uint32_t node, const Matcher& m, int depth, std::vector<Matcher>& scratch,
                     TokenMask& out) const {
    Matcher& next = scratch[static_cast<size_t>(depth + 1)];
    const Node& n = nodes_[node];
    for (uint32_t i = n.first_child; i < n.first_child + n.n_children; ++i) {
        const auto [byte, child] = children_[i];
        if (!m.advance_into(byte, next)) continue;
        const Node& c = nodes_[child];
        for (uint32_t k = c.first_token; k < c.first_token + c.n_tokens; ++k) {
            const auto t = static_cast<size_t>(tokens_[k]);
            out[t >> 6] |= uint64_t{1} << (t & 63);
        }
        if (c.n_children > 0) walk(child, next, depth + 1, scratch, out);
    }
}

TokenMask VocabTrie::mask(const Matcher& m) const {
    TokenMask out((static_cast<size_t>(n_tokens_) + 63) / 64, 0);
    std::vector<Matcher> scratch(max_len_ + 1, m);  // one state per depth, reused (never grown)
    walk(0, m, 0, scratch, out);
    if (m.can_end())
        for (int32_t t : end_tokens_) out[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
    return out;
}

const TokenMask& MaskCache::mask(const Matcher& m) {
    const uint64_t id = m.grammar().id, h = m.hash() ^ (id * 0x9E3779B97F4A7C15ull);
    for (auto [it, end] = index_.equal_range(h); it != end; ++it)
        if (it->second->grammar == id && it->second->key == m.key()) {
            ++hits_;
            lru_.splice(lru_.begin(), lru_, it->second);
            return it->second->mask;
        }
    ++misses_;
    lru_.push_front({h, id, m.key(), trie_.mask(m)});
    index_.emplace(h, lru_.begin());
    if (lru_.size() > capacity_) {
        const auto last = std::prev(lru_.end());
        for (auto [it, end] = index_.equal_range(last->hash); it != end; ++it)
            if (it->second == last) {
                index_.erase(it);
                break;
            }
        lru_.pop_back();
    }
    return lru_.front().mask;
}

}  // namespace syslm::grammar
