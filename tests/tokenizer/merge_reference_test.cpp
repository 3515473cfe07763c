// The BPE and SentencePiece merge loops against naive reference implementations written from
// the algorithms' definitions (rescan every adjacent pair after each merge; O(n^2), obviously
// right), on random vocabularies and words with many repeats and ties.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "test_util.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/spm.hpp"
#include "tokenizer/vocab_gguf.hpp"

using namespace syslm::tokenizer;

namespace {

// BPE by definition: merge the adjacent pair of lowest rank, leftmost on ties, until none has one.
std::vector<std::string> naive_bpe(const std::string& word,
                                   const std::map<std::pair<std::string, std::string>, int>& rank) {
    std::vector<std::string> sym;
    for (char c : word) sym.push_back(byte_level_encode(std::string(1, c)));
    while (true) {
        int best = -1, best_rank = INT32_MAX;
        for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) {
            auto it = rank.find({sym[i], sym[i + 1]});
            if (it != rank.end() && it->second < best_rank) best = i, best_rank = it->second;
        }
        if (best < 0) return sym;
        sym[best] += sym[best + 1];
        sym.erase(sym.begin() + best + 1);
    }
}

// SentencePiece by definition: merge the adjacent pair whose concatenation is the token with the
// highest score, leftmost on ties.
std::vector<std::string> naive_spm(const std::string& text,
                                   const std::map<std::string, float>& score) {
    std::vector<std::string> sym;
    for (size_t i = 0; i < text.size();) {
        const size_t n =
            std::min(utf8_len_from_lead(static_cast<uint8_t>(text[i])), text.size() - i);
        sym.push_back(text.substr(i, n));
        i += n;
    }
    while (true) {
        int best = -1;
        float best_score = 0;
        for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) {
            auto it = score.find(sym[i] + sym[i + 1]);
            if (it != score.end() && (best < 0 || it->second > best_score))
                best = i, best_score = it->second;
        }
        if (best < 0) return sym;
        sym[best] += sym[best + 1];
        sym.erase(sym.begin() + best + 1);
    }
}

}  // namespace

TEST(MergeReference, BpeMatchesNaiveDefinition) {
    std::mt19937 rng(11);
    const std::string alphabet = "abcab \xC3\xA9";  // skewed toward a and b: many repeats
    for (int trial = 0; trial < 20; ++trial) {
        // A vocabulary: the 256 byte characters plus the results of random merges of existing
        // tokens (ranks in creation order), as BPE training produces.
        VocabSpec spec;
        spec.type = VocabType::BPE;
        spec.pre = "gpt-2";
        for (int b = 0; b < 256; ++b)
            spec.tokens.push_back(byte_level_encode(std::string(1, char(b))));
        std::set<std::string> have(spec.tokens.begin(), spec.tokens.end());
        std::vector<std::string> pool;
        for (char c : alphabet) pool.push_back(byte_level_encode(std::string(1, c)));
        std::map<std::pair<std::string, std::string>, int> rank;
        const int n_merges = 40 + trial * 5;
        while (static_cast<int>(spec.merges.size()) < n_merges) {
            const std::string& l =
                pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
            const std::string& r =
                pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
            if (rank.count({l, r}) || (l + r).size() > 24) continue;
            rank[{l, r}] = static_cast<int>(spec.merges.size());
            spec.merges.push_back(l + " " + r);
            if (have.insert(l + r).second) spec.tokens.push_back(l + r);
            pool.push_back(l + r);
        }
        const std::vector<std::string> merges = spec.merges;
        const Vocab vocab(std::move(spec));
        const BpeMerges bpe(vocab, merges);
        for (int w = 0; w < 200; ++w) {
            std::string word;
            const size_t len = std::uniform_int_distribution<size_t>(1, 23)(rng);
            while (word.size() < len)
                word +=
                    alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
            std::vector<int32_t> got;
            bpe.encode_word(word, got);
            std::vector<int32_t> want;
            for (const auto& s : naive_bpe(word, rank)) want.push_back(vocab.find(s));
            ASSERT_EQ(got, want) << "trial " << trial << " word '" << word << "'";
        }
    }
}

TEST(MergeReference, SpmMatchesNaiveDefinition) {
    std::mt19937 rng(12);
    const std::vector<std::string> chars = {"a",        "b",           "c", "\xE2\x96\x81",
                                            "\xC3\xA9", "\xE4\xB8\x96"};
    for (int trial = 0; trial < 20; ++trial) {
        VocabSpec spec;
        spec.type = VocabType::SPM;
        spec.tokens = {"<unk>", "<s>", "</s>"};
        spec.token_types = {2, 3, 3};
        spec.scores = {0, 0, 0};
        for (int b = 0; b < 256; ++b) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "<0x%02X>", b);
            spec.tokens.push_back(hex);
            spec.token_types.push_back(6);
            spec.scores.push_back(0);
        }
        std::map<std::string, float> score;
        // Single characters (but not all: some must fall back to bytes), then random strings
        // with scores that often tie.
        for (size_t i = 0; i + 1 < chars.size(); ++i) {
            spec.tokens.push_back(chars[i]);
            spec.token_types.push_back(1);
            spec.scores.push_back(-100.0f - i);
            score[chars[i]] = -100.0f - i;
        }
        while (spec.tokens.size() < 300u + trial * 10) {
            std::string t;
            const int n = std::uniform_int_distribution<int>(2, 5)(rng);
            for (int i = 0; i < n; ++i)
                t += chars[std::uniform_int_distribution<size_t>(0, chars.size() - 1)(rng)];
            if (score.count(t)) continue;
            const float s = static_cast<float>(-std::uniform_int_distribution<int>(0, 20)(rng));
            score[t] = s;
            spec.tokens.push_back(t);
            spec.token_types.push_back(1);
            spec.scores.push_back(s);
        }
        const Vocab vocab(std::move(spec));
        for (int w = 0; w < 200; ++w) {
            std::string text;
            const int len = std::uniform_int_distribution<int>(1, 30)(rng);
            for (int i = 0; i < len; ++i)
                text += chars[std::uniform_int_distribution<size_t>(0, chars.size() - 1)(rng)];
            std::vector<int32_t> got;
            spm_tokenize(vocab, text, got);
            std::vector<int32_t> want;
            for (const auto& s : naive_spm(text, score)) {
                if (const int32_t id = vocab.find(s); id >= 0) {
                    want.push_back(id);
                } else {
                    for (unsigned char c : s) want.push_back(vocab.byte_token[c]);
                }
            }
            ASSERT_EQ(got, want) << "trial " << trial << " text '" << text << "'";
        }
    }
}

TEST(MergeReference, SpmCutTextGivesTheSameTokens) {
    // spm_tokenize cuts text between characters that no token holds side by side; the result
    // must equal the merge loop over the whole text.
    const syslm::io::GGUFFile file(test::shared_vocab_path("llama-spm"));
    Vocab split(read_vocab_spec(file));
    ASSERT_TRUE(split.spm_cut_text);
    ASSERT_EQ(split.spm_pairs.size(), 3538u);  // distinct adjacent pairs in LLaMA's tokens (Python)
    Vocab whole = split;
    whole.spm_cut_text = false;
    auto escape = [](const std::string& s) {
        std::string out;
        for (char c : s) out += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
        return out;
    };
    std::mt19937 rng(8);
    std::vector<std::string> texts = {test::kjv_text().substr(0, 200000)};
    for (int i = 0; i < 200; ++i)
        texts.push_back(i % 2 ? test::random_unicode(rng, 150) : test::random_bytes(rng, 150));
    for (const auto& t : texts) {
        const std::string e = escape(t);
        std::vector<int32_t> a, b;
        spm_tokenize(split, e, a);
        spm_tokenize(whole, e, b);
        ASSERT_EQ(a, b);
    }
}
