#include "tokenizer/spm.hpp"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "core/error.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::tokenizer {

namespace {

// The merge loop over one piece of text.
void tokenize_piece(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
    struct Symbol {
        int32_t prev, next;
        uint32_t start, len;  // bytes of text; len == 0 once merged into the left neighbour
    };
    struct Bigram {
        float score;
        int32_t left, right;
        uint32_t len;  // bytes of both symbols when queued; differs once either has changed
        bool operator<(const Bigram& o) const {  // priority_queue pops the largest
            return score != o.score ? score < o.score : left > o.left;
        }
    };
    std::vector<Symbol> sym;
    sym.reserve(text.size());
    for (size_t off = 0; off < text.size();) {
        const size_t len =
            std::min(utf8_len_from_lead(static_cast<uint8_t>(text[off])), text.size() - off);
        const auto i = static_cast<int32_t>(sym.size());
        sym.push_back({i - 1, off + len < text.size() ? i + 1 : -1, static_cast<uint32_t>(off),
                       static_cast<uint32_t>(len)});
        off += len;
    }

    std::priority_queue<Bigram> queue;
    auto consider = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        const uint32_t len = sym[l].len + sym[r].len;
        const int32_t tok = vocab.find(text.substr(sym[l].start, len));
        if (tok >= 0) queue.push({vocab.score[tok], l, r, len});
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i, i + 1);

    while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        Symbol& l = sym[b.left];
        Symbol& r = sym[b.right];
        if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = b.left;
        consider(l.prev, b.left);
        consider(b.left, l.next);
    }

    for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
        const std::string_view piece = text.substr(sym[i].start, sym[i].len);
        const int32_t tok = vocab.find(piece);
        if (tok >= 0) {
            out.push_back(tok);
            continue;
        }
        const bool all_bytes = std::all_of(piece.begin(), piece.end(), [&](char c) {
            return vocab.byte_token[static_cast<uint8_t>(c)] >= 0;
        });
        if (all_bytes) {
            for (char c : piece) out.push_back(vocab.byte_token[static_cast<uint8_t>(c)]);
            continue;
        }
        // No byte fallback (older SentencePiece models): one unknown token per character.
        SYSLM_CHECK(vocab.unk >= 0, vocab.source, ": cannot tokenize '", piece,
                    "': the vocabulary has neither byte tokens for it nor an unknown token");
        out.push_back(vocab.unk);
    }
}

}  // namespace

namespace {

// A character of up to 4 bytes packed into 32 bits. Different characters may share a key only
// when NUL bytes are involved; a shared key can only prevent a cut, never allow a wrong one.
uint32_t pack(std::string_view c) {
    uint32_t v = 0;
    for (size_t i = 0; i < c.size() && i < 4; ++i) v |= uint32_t(uint8_t(c[i])) << (8 * i);
    return v;
}

size_t char_len(std::string_view s, size_t off) {
    return std::min(utf8_len_from_lead(static_cast<uint8_t>(s[off])), s.size() - off);
}

}  // namespace

uint64_t spm_pair_key(std::string_view left, std::string_view right) {
    return (uint64_t(pack(left)) << 32) | pack(right);
}

std::vector<uint64_t> spm_adjacent_pairs(const Vocab& vocab) {
    std::vector<uint64_t> pairs;
    for (const std::string& t : vocab.text) {
        size_t prev = 0, prev_len = 0;
        for (size_t off = 0; off < t.size();) {
            const size_t len = char_len(t, off);
            if (off > 0)
                pairs.push_back(spm_pair_key(std::string_view(t).substr(prev, prev_len),
                                             std::string_view(t).substr(off, len)));
            prev = off, prev_len = len;
            off += len;
        }
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    return pairs;
}

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
    if (!vocab.spm_cut_text) {
        tokenize_piece(vocab, text, out);
        return;
    }
    std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
    std::vector<int32_t> cached;
    auto emit = [&](std::string_view piece) {
        auto it = cache.find(piece);
        if (it != cache.end()) {
            out.insert(out.end(), cached.begin() + it->second.first,
                       cached.begin() + it->second.first + it->second.second);
            return;
        }
        const size_t before = out.size();
        tokenize_piece(vocab, piece, out);
        const auto off = static_cast<uint32_t>(cached.size());
        cached.insert(cached.end(), out.begin() + before, out.end());
        cache.emplace(piece, std::make_pair(off, static_cast<uint32_t>(out.size() - before)));
    };
    // Cuts fall only on the character boundaries tokenize_piece itself uses (lead-byte lengths
    // from the start of the text), so invalid UTF-8 cannot shift them.
    size_t start = 0, prev = 0, prev_len = 0;
    for (size_t off = 0; off < text.size();) {
        const size_t len = char_len(text, off);
        if (off > 0 &&
            !std::binary_search(vocab.spm_pairs.begin(), vocab.spm_pairs.end(),
                                spm_pair_key(text.substr(prev, prev_len), text.substr(off, len)))) {
            emit(text.substr(start, off - start));
            start = off;
        }
        prev = off, prev_len = len;
        off += len;
    }
    if (start < text.size()) emit(text.substr(start));
}

}  // namespace syslm::tokenizer
