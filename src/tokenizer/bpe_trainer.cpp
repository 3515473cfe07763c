#include "tokenizer/bpe_trainer.hpp"

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "core/error.hpp"
#include "io/gguf.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/utf8.hpp"
#include "tokenizer/vocab_gguf.hpp"

namespace syslm::tokenizer {
namespace {

const std::vector<std::string>& family_regexes(const std::string& pre) {
    const PreTokenizerConfig* cfg = find_pre_tokenizer(pre);
    if (!cfg) {
        std::string known;
        for (const auto& n : known_pre_tokenizer_names()) known += (known.empty() ? "" : ", ") + n;
        fail("BPE trainer: unknown pre-tokenizer family '", pre, "' (known: ", known, ")");
    }
    return cfg->regexes;
}

uint64_t pair_key(uint32_t left, uint32_t right) {
    return (static_cast<uint64_t>(left) << 32) | right;
}
uint32_t key_left(uint64_t k) {
    return static_cast<uint32_t>(k >> 32);
}
uint32_t key_right(uint64_t k) {
    return static_cast<uint32_t>(k);
}

struct Word {
    std::vector<uint32_t> symbols;  // token ids
    uint64_t freq;
};

// One candidate in the max-heap; stale when `count` is no longer the pair's count.
struct HeapEntry {
    uint64_t count;
    uint64_t pair;
};

// The state of one training run: words as symbol sequences, pair counts, pair -> words index.
class MergeState {
public:
    MergeState(std::vector<Word> words, std::vector<std::string>& text)
        : words_(std::move(words)), text_(text) {
        for (uint32_t w = 0; w < words_.size(); ++w) {
            const auto& s = words_[w].symbols;
            for (size_t i = 0; i + 1 < s.size(); ++i) {
                const uint64_t p = pair_key(s[i], s[i + 1]);
                count_[p] += words_[w].freq;
                where_[p].push_back(w);
            }
        }
        heap_.reserve(count_.size());
        for (const auto& [p, c] : count_) heap_.push_back({c, p});
        std::make_heap(heap_.begin(), heap_.end(), lower());
    }

    // The most frequent pair (ties: smallest left text, then right text) and its count; count 0
    // when no pair is left.
    HeapEntry best() {
        while (!heap_.empty()) {
            const HeapEntry top = heap_.front();
            auto it = count_.find(top.pair);
            if (it != count_.end() && it->second == top.count) return top;
            std::pop_heap(heap_.begin(), heap_.end(), lower());
            heap_.pop_back();
        }
        return {0, 0};
    }

    // Replaces every occurrence of `pair` (left to right, no overlap) by token `id`.
    void merge(uint64_t pair, uint32_t id) {
        const uint32_t a = key_left(pair), b = key_right(pair);
        auto wit = where_.find(pair);
        SYSLM_CHECK(wit != where_.end(), "BPE trainer: internal error: pair without words");
        std::vector<uint32_t> affected = std::move(wit->second);
        where_.erase(wit);
        std::sort(affected.begin(), affected.end());
        affected.erase(std::unique(affected.begin(), affected.end()), affected.end());

        deltas_.clear();
        for (uint32_t w : affected) {
            auto& s = words_[w].symbols;
            const int64_t f = static_cast<int64_t>(words_[w].freq);
            bool has = false;
            for (size_t i = 0; i + 1 < s.size() && !has; ++i) has = s[i] == a && s[i + 1] == b;
            if (!has) continue;  // index entries are never removed, so some are stale
            for (size_t i = 0; i + 1 < s.size(); ++i)
                deltas_.push_back({pair_key(s[i], s[i + 1]), -f});
            size_t o = 0;
            for (size_t i = 0; i < s.size();) {
                if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
                    s[o++] = id;
                    i += 2;
                } else {
                    s[o++] = s[i++];
                }
            }
            s.resize(o);
            for (size_t i = 0; i + 1 < s.size(); ++i) {
                const uint64_t p = pair_key(s[i], s[i + 1]);
                deltas_.push_back({p, f});
                // Only pairs with the new token are new to this word; the others are indexed.
                if (s[i] == id || s[i + 1] == id) where_[p].push_back(w);
            }
        }

        // Net change per pair; the heap gets a fresh entry for every pair whose count moved.
        std::sort(deltas_.begin(), deltas_.end(),
                  [](const Delta& x, const Delta& y) { return x.pair < y.pair; });
        for (size_t i = 0; i < deltas_.size();) {
            const uint64_t p = deltas_[i].pair;
            int64_t d = 0;
            for (; i < deltas_.size() && deltas_[i].pair == p; ++i) d += deltas_[i].delta;
            if (d == 0) continue;
            uint64_t& c = count_[p];
            c = static_cast<uint64_t>(static_cast<int64_t>(c) + d);
            if (c == 0) {
                count_.erase(p);
                where_.erase(p);
            } else {
                heap_.push_back({c, p});
                std::push_heap(heap_.begin(), heap_.end(), lower());
            }
        }
    }

    uint64_t total_symbols() const {
        uint64_t n = 0;
        for (const auto& w : words_) n += w.freq * w.symbols.size();
        return n;
    }

private:
    struct Delta {
        uint64_t pair;
        int64_t delta;
    };

    // Heap order: x below y when x has the smaller count, or the same count and the larger
    // (left text, right text).
    struct Lower {
        const std::vector<std::string>* text;
        bool operator()(const HeapEntry& x, const HeapEntry& y) const {
            if (x.count != y.count) return x.count < y.count;
            const std::string& xl = (*text)[key_left(x.pair)];
            const std::string& yl = (*text)[key_left(y.pair)];
            if (xl != yl) return xl > yl;
            return (*text)[key_right(x.pair)] > (*text)[key_right(y.pair)];
        }
    };
    Lower lower() const { return Lower{&text_}; }

    std::vector<Word> words_;
    const std::vector<std::string>& text_;  // token id -> byte-level text (grows with merges)
    std::unordered_map<uint64_t, uint64_t> count_;
    std::unordered_map<uint64_t, std::vector<uint32_t>> where_;
    std::vector<HeapEntry> heap_;
    std::vector<Delta> deltas_;
};

}  // namespace

BpeTrainer::BpeTrainer(BpeTrainerOptions options)
    : options_(std::move(options)), pre_tokenizer_(family_regexes(options_.pre)) {
    const auto& sp = options_.special_tokens;
    for (size_t i = 0; i < sp.size(); ++i) {
        SYSLM_CHECK(!sp[i].empty(), "BPE trainer: special token ", i + 1, " is empty");
        for (size_t j = 0; j < i; ++j)
            SYSLM_CHECK(sp[i] != sp[j], "BPE trainer: special token '", sp[i], "' is given twice");
    }
    SYSLM_CHECK(options_.vocab_size >= 256 + sp.size(), "BPE trainer: vocabulary size ",
                options_.vocab_size, " is too small: the 256 byte tokens and ", sp.size(),
                " special token(s) need at least ", 256 + sp.size());
    SYSLM_CHECK(options_.vocab_size <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                "BPE trainer: vocabulary size ", options_.vocab_size, " does not fit token ids");
}

void BpeTrainer::add_text(std::string_view text) {
    SYSLM_CHECK(!trained_, "BPE trainer: add_text after train()");
    stats_.text_bytes += text.size();
    const auto& sp = options_.special_tokens;
    if (sp.empty()) return count_words(text);
    // Cut special tokens out (leftmost occurrence first, the longest one at a tie); next[k]
    // caches where special k occurs next so the text is searched once per special token.
    std::vector<size_t> next(sp.size(), 0);
    for (size_t k = 0; k < sp.size(); ++k) next[k] = text.find(sp[k]);
    size_t pos = 0;
    while (pos < text.size()) {
        size_t at = std::string_view::npos, len = 0;
        for (size_t k = 0; k < sp.size(); ++k) {
            if (next[k] != std::string_view::npos && next[k] < pos) next[k] = text.find(sp[k], pos);
            if (next[k] < at ||
                (next[k] == at && next[k] != std::string_view::npos && sp[k].size() > len)) {
                at = next[k];
                len = sp[k].size();
            }
        }
        if (at == std::string_view::npos) {
            count_words(text.substr(pos));
            break;
        }
        count_words(text.substr(pos, at - pos));
        ++stats_.special_occurrences;
        pos = at + len;
    }
}

void BpeTrainer::count_words(std::string_view text) {
    if (text.empty()) return;
    pieces_.clear();
    pre_tokenizer_.split(text, pieces_);
    for (std::string_view piece : pieces_) {
        if (piece.empty()) continue;
        ++stats_.words;
        auto it = word_counts_.find(piece);
        if (it == word_counts_.end()) it = word_counts_.emplace(std::string(piece), 0).first;
        ++it->second;
    }
    stats_.distinct_words = word_counts_.size();
}

VocabSpec BpeTrainer::train() {
    SYSLM_CHECK(!trained_, "BPE trainer: train() may be called once");
    trained_ = true;
    SYSLM_CHECK(stats_.text_bytes > 0, "BPE trainer: no training text (the input is empty)");
    SYSLM_CHECK(!word_counts_.empty(),
                "BPE trainer: the training text holds nothing but special tokens");

    VocabSpec spec;
    spec.type = VocabType::BPE;
    spec.pre = options_.pre;
    spec.tokens.reserve(options_.vocab_size);
    for (int b = 0; b < 256; ++b)
        spec.tokens.push_back(utf8_encode(byte_to_codepoint(static_cast<uint8_t>(b))));

    std::vector<Word> words;
    words.reserve(word_counts_.size());
    for (auto& [w, freq] : word_counts_) {
        Word word{{}, freq};
        word.symbols.assign(w.begin(), w.end());
        for (auto& s : word.symbols) s &= 0xFF;  // char -> byte value
        words.push_back(std::move(word));
    }
    word_counts_.clear();

    const size_t n_merges_max = options_.vocab_size - 256 - options_.special_tokens.size();
    const uint64_t min_freq = std::max<uint64_t>(options_.min_frequency, 1);
    MergeState state(std::move(words), spec.tokens);
    while (spec.merges.size() < n_merges_max) {
        const HeapEntry top = state.best();
        if (top.count < min_freq) {
            stats_.stopped_early = true;
            break;
        }
        const std::string& l = spec.tokens[key_left(top.pair)];
        const std::string& r = spec.tokens[key_right(top.pair)];
        spec.merges.push_back(l + ' ' + r);
        std::string merged = l + r;  // `l` and `r` dangle once tokens grows
        spec.tokens.push_back(std::move(merged));
        state.merge(top.pair, static_cast<uint32_t>(spec.tokens.size() - 1));
    }
    stats_.merges = spec.merges.size();
    stats_.tokens = state.total_symbols() + stats_.special_occurrences;

    spec.token_types.assign(spec.tokens.size(), static_cast<int32_t>(TokenType::NORMAL));
    std::unordered_set<std::string_view> learned(spec.tokens.begin(), spec.tokens.end());
    for (const auto& s : options_.special_tokens)
        SYSLM_CHECK(!learned.count(s), "BPE trainer: special token '", s,
                    "' has the same text as a learned token; choose another text");
    learned.clear();  // views into spec.tokens, which grows below
    for (const auto& s : options_.special_tokens) {
        spec.tokens.push_back(s);
        spec.token_types.push_back(static_cast<int32_t>(TokenType::CONTROL));
    }
    if (!options_.special_tokens.empty()) {
        const auto id = static_cast<uint32_t>(spec.tokens.size() - options_.special_tokens.size());
        spec.bos = id;
        spec.eos = id;
    }
    spec.add_bos = false;
    spec.add_eos = false;
    return spec;
}

void write_tokenizer_gguf(const VocabSpec& spec, const std::string& path) {
    io::GGUFWriter w;
    w.set("general.name", io::GGUFValue::string("syslm byte-level BPE"));
    write_vocab_spec(w, spec);
    w.write(path);
}

}  // namespace syslm::tokenizer
