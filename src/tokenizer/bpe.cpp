#include "tokenizer/bpe.hpp"

#include <algorithm>
#include <queue>
#include <string>

#include "core/error.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::tokenizer {

BpeMerges::BpeMerges(const Vocab& vocab, const std::vector<std::string>& merges) {
    std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> interned;
    auto intern = [&](std::string_view s) -> uint32_t {
        auto it = interned.find(s);
        if (it != interned.end()) return it->second;
        const auto id = static_cast<uint32_t>(symbol_text_.size());
        symbol_text_.emplace_back(s);
        token_of_.push_back(vocab.find(s));
        interned.emplace(std::string(s), id);
        return id;
    };
    for (int b = 0; b < 256; ++b) {
        byte_symbol_[b] = intern(utf8_encode(byte_to_codepoint(static_cast<uint8_t>(b))));
        one_byte_token_[b] = vocab.find(std::string(1, static_cast<char>(b)));
    }
    pair_.reserve(merges.size() * 2);
    for (size_t i = 0; i < merges.size(); ++i) {
        const std::string& m = merges[i];
        // The separator is the first space after the first character (a left part may itself be
        // a lone space in vocabularies that are not byte-level).
        const size_t sp = m.find(' ', 1);
        SYSLM_CHECK(sp != std::string::npos && sp + 1 < m.size(), vocab.source,
                    ": tokenizer.ggml.merges[", i, "] = '", m, "' is not \"left right\"");
        const std::string_view left = std::string_view(m).substr(0, sp);
        const std::string_view right = std::string_view(m).substr(sp + 1);
        const uint32_t l = intern(left), r = intern(right);
        const uint32_t joined = intern(std::string(left) + std::string(right));
        pair_.emplace(key(l, r), Merge{static_cast<int32_t>(i), joined});  // first rank wins
    }
}

void BpeMerges::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    struct Symbol {
        uint32_t id;  // interned text
        int32_t prev, next;
        bool alive;
    };
    struct Candidate {
        int32_t rank, left, right;
        uint32_t left_id, right_id, result;
        bool operator<(const Candidate& o) const {  // priority_queue pops the largest
            return rank != o.rank ? rank > o.rank : left > o.left;
        }
    };
    const int32_t n = static_cast<int32_t>(word.size());
    std::vector<Symbol> sym(n);
    for (int32_t i = 0; i < n; ++i)
        sym[i] = {byte_symbol_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true};

    std::priority_queue<Candidate> queue;
    auto consider = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        auto it = pair_.find(key(sym[l].id, sym[r].id));
        if (it != pair_.end())
            queue.push({it->second.rank, l, r, sym[l].id, sym[r].id, it->second.result});
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);

    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        Symbol& l = sym[c.left];
        Symbol& r = sym[c.right];
        // Stale: one side was merged away or has grown since this pair was queued.
        if (!l.alive || !r.alive || l.id != c.left_id || r.id != c.right_id) continue;
        l.id = c.result;
        r.alive = false;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = c.left;
        consider(l.prev, c.left);
        consider(c.left, l.next);
    }

    for (int32_t i = 0; i >= 0 && i < n; i = sym[i].next) {
        const int32_t tok = token_of_[sym[i].id];
        if (tok >= 0) {
            out.push_back(tok);
            continue;
        }
        for (char ch : symbol_text_[sym[i].id]) {
            const int32_t t = one_byte_token_[static_cast<uint8_t>(ch)];
            if (t >= 0) out.push_back(t);
        }
    }
}

}  // namespace syslm::tokenizer
