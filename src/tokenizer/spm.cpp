#include "tokenizer/spm.hpp"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "core/error.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::tokenizer {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

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

bool spm_can_split_words(const Vocab& vocab) {
    for (const std::string& t : vocab.text) {
        size_t lead = 0;
        while (t.compare(lead, kSpace.size(), kSpace) == 0) lead += kSpace.size();
        if (t.find(kSpace, lead) != std::string::npos) return false;
    }
    return true;
}

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
    if (!vocab.spm_split_words) {
        tokenize_piece(vocab, text, out);
        return;
    }
    // Cut before every U+2581 run that follows another character. Cuts are made only at the
    // character boundaries tokenize_piece itself would use (by lead-byte length), so invalid
    // UTF-8 cannot shift them.
    std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
    std::vector<int32_t> cached;
    auto emit = [&](std::string_view word) {
        if (word.empty()) return;
        auto it = cache.find(word);
        if (it != cache.end()) {
            out.insert(out.end(), cached.begin() + it->second.first,
                       cached.begin() + it->second.first + it->second.second);
            return;
        }
        const size_t before = out.size();
        tokenize_piece(vocab, word, out);
        const auto off = static_cast<uint32_t>(cached.size());
        cached.insert(cached.end(), out.begin() + before, out.end());
        cache.emplace(word, std::make_pair(off, static_cast<uint32_t>(out.size() - before)));
    };
    size_t word_start = 0;
    bool prev_space = false;
    for (size_t off = 0; off < text.size();) {
        const size_t len =
            std::min(utf8_len_from_lead(static_cast<uint8_t>(text[off])), text.size() - off);
        const bool space = text.substr(off, len) == kSpace;
        if (space && !prev_space && off > word_start) {
            emit(text.substr(word_start, off - word_start));
            word_start = off;
        }
        prev_space = space;
        off += len;
    }
    emit(text.substr(word_start));
}

}  // namespace syslm::tokenizer
