// BPE training (bpe_trainer.hpp): the merges of toy corpora worked out by hand, determinism, the
// exact vocabulary size, the written GGUF read back by Tokenizer (lossless round trip on random
// text, and the same segmentation of the training text as training produced), speed on the King
// James Bible, and the errors.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>

#include "core/error.hpp"
#include "io/gguf.hpp"
#include "test_util.hpp"
#include "tokenizer/bpe_trainer.hpp"

using namespace syslm::tokenizer;
using syslm::tokenizer::test::kjv_text;
using syslm::tokenizer::test::random_bytes;
using syslm::tokenizer::test::random_unicode;

namespace {

VocabSpec train_on(const std::vector<std::string>& texts, BpeTrainerOptions opt,
                   BpeTrainStats* stats = nullptr) {
    BpeTrainer trainer(std::move(opt));
    for (const auto& t : texts) trainer.add_text(t);
    VocabSpec spec = trainer.train();
    if (stats) *stats = trainer.stats();
    return spec;
}

BpeTrainerOptions options(size_t vocab, uint64_t min_frequency = 2,
                          std::vector<std::string> special = {"<|endoftext|>"}) {
    BpeTrainerOptions o;
    o.vocab_size = vocab;
    o.min_frequency = min_frequency;
    o.special_tokens = std::move(special);
    return o;
}

// `word` repeated n times, one per line (the newlines are words of their own with no pairs).
std::string lines(const std::string& word, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += word + "\n";
    return s;
}

std::vector<std::string> first_merges(const VocabSpec& spec, size_t n) {
    return {spec.merges.begin(), spec.merges.begin() + std::min(n, spec.merges.size())};
}

// Pseudo-English with some multi-byte text: a seeded mix of a small word list, numbers,
// punctuation, and random Unicode runs.
std::string generated_corpus(uint32_t seed, size_t n_words) {
    static const char* kWords[] = {
        "the",    "and",   "of",   "to",     "in",   "that",     "he",      "shall", "unto",
        "for",    "I",     "his",  "a",      "lord", "they",     "be",      "is",    "him",
        "not",    "them",  "it",   "with",   "all",  "thou",     "thy",     "was",   "God",
        "which",  "my",    "me",   "said",   "but",  "ye",       "their",   "have",  "will",
        "Zürich", "naïve", "café", "日本語", "über", "ελληνικά", "русский", "don't", "it's"};
    std::mt19937 rng(seed);
    std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
    std::uniform_int_distribution<int> kind(0, 99);
    std::string s;
    for (size_t i = 0; i < n_words; ++i) {
        const int k = kind(rng);
        if (k < 80) {
            s += kWords[word(rng)];
        } else if (k < 88) {
            s += std::to_string(rng() % 5000);
        } else if (k < 95) {
            s += ",;.!?"[rng() % 5];
        } else {
            s += random_unicode(rng, 1 + rng() % 4);
        }
        s += (rng() % 12 == 0) ? "\n" : " ";
    }
    return s;
}

std::string tmp_path(const std::string& name) {
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    return std::string(SYSLM_TEST_TMP) + "/" + name;
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const syslm::Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
            << "error '" << e.what() << "' does not mention '" << needle << "'";
    }
}

}  // namespace

// Counts: hug 10, pug 5, pun 12, bun 4, hugs 5 (HF's course example). "u g" occurs 20 times,
// then "u n" 16 (p u 12 < 16), then "h ug" 15.
TEST(BpeTrainer, ToyCorpusFirstMerges) {
    const std::string text =
        lines("hug", 10) + lines("pug", 5) + lines("pun", 12) + lines("bun", 4) + lines("hugs", 5);
    const VocabSpec spec = train_on({text}, options(256 + 3 + 1));
    EXPECT_EQ(first_merges(spec, 3), (std::vector<std::string>{"u g", "u n", "h ug"}));
    ASSERT_EQ(spec.tokens.size(), 260u);
    EXPECT_EQ(spec.tokens[256], "ug");
    EXPECT_EQ(spec.tokens[257], "un");
    EXPECT_EQ(spec.tokens[258], "hug");
    EXPECT_EQ(spec.tokens[259], "<|endoftext|>");
}

// Words that begin with a space carry GPT-2's 'Ġ' (U+0120); a merge applies left to right
// without overlap, so "aaa" (two overlapping "a a" pairs, 2 x 3 = 6) becomes "aa a".
TEST(BpeTrainer, ByteLevelTextAndOverlap) {
    const VocabSpec spec = train_on({lines("aaa", 3) + lines(" x", 2)}, options(256 + 3, 2, {}));
    EXPECT_EQ(first_merges(spec, 3), (std::vector<std::string>{"a a", "aa a", "\xC4\xA0 x"}));
    EXPECT_EQ(spec.tokens[' '], "\xC4\xA0");   // byte 0x20 -> U+0120
    EXPECT_EQ(spec.tokens['\n'], "\xC4\x8A");  // byte 0x0A -> U+010A
    EXPECT_EQ(spec.tokens['a'], "a");
}

// Equal counts go to the pair with the smallest left text, then the smallest right text.
TEST(BpeTrainer, TiesBreakOnTheTexts) {
    const std::string text = lines("zb", 3) + lines("ac", 3) + lines("ab", 3) + lines("yy", 5);
    const VocabSpec spec = train_on({text}, options(256 + 4, 2, {}));
    EXPECT_EQ(first_merges(spec, 4), (std::vector<std::string>{"y y", "a b", "a c", "z b"}));
}

// min_frequency stops the merges early: the vocabulary is then smaller than asked.
TEST(BpeTrainer, MinFrequencyStopsEarly) {
    BpeTrainStats st;
    const VocabSpec spec = train_on({lines("ab", 3) + lines("cd", 2)}, options(300, 3), &st);
    EXPECT_EQ(spec.merges, std::vector<std::string>{"a b"});
    EXPECT_TRUE(st.stopped_early);
    EXPECT_EQ(spec.tokens.size(), 256u + 1 + 1);
    EXPECT_EQ(spec.tokens.back(), "<|endoftext|>");
}

TEST(BpeTrainer, DeterministicAndIndependentOfDocumentOrder) {
    const std::string a = generated_corpus(1, 30000), b = generated_corpus(2, 30000);
    const VocabSpec x = train_on({a, b}, options(1500));
    const VocabSpec y = train_on({a, b}, options(1500));
    const VocabSpec z = train_on({b, a}, options(1500));
    EXPECT_EQ(x.merges, y.merges);
    EXPECT_EQ(x.tokens, y.tokens);
    EXPECT_EQ(x.merges, z.merges);
    EXPECT_EQ(x.tokens, z.tokens);
}

TEST(BpeTrainer, ExactVocabularySizeAndLayout) {
    BpeTrainStats st;
    const VocabSpec spec =
        train_on({generated_corpus(3, 40000)}, options(1000, 2, {"<|endoftext|>", "<|pad|>"}), &st);
    ASSERT_EQ(spec.tokens.size(), 1000u);
    ASSERT_EQ(spec.token_types.size(), 1000u);
    EXPECT_EQ(spec.merges.size(), 1000u - 256 - 2);
    EXPECT_EQ(st.merges, spec.merges.size());
    EXPECT_FALSE(st.stopped_early);
    EXPECT_EQ(spec.tokens[998], "<|endoftext|>");
    EXPECT_EQ(spec.tokens[999], "<|pad|>");
    EXPECT_EQ(spec.token_types[998], static_cast<int32_t>(TokenType::CONTROL));
    EXPECT_EQ(spec.token_types[999], static_cast<int32_t>(TokenType::CONTROL));
    EXPECT_EQ(spec.token_types[997], static_cast<int32_t>(TokenType::NORMAL));
    EXPECT_EQ(spec.bos, 998u);
    EXPECT_EQ(spec.eos, 998u);
    // Every merge's result is the token made right after it.
    for (size_t i = 0; i < spec.merges.size(); ++i) {
        const size_t sp = spec.merges[i].find(' ');
        ASSERT_NE(sp, std::string::npos);
        EXPECT_EQ(spec.merges[i].substr(0, sp) + spec.merges[i].substr(sp + 1),
                  spec.tokens[256 + i]);
    }
}

// Special tokens are cut out of the training text: they are counted, never merged into words.
TEST(BpeTrainer, SpecialTokensAreCutOut) {
    BpeTrainStats st;
    const std::string doc = lines("abab", 4);
    const VocabSpec spec =
        train_on({doc + "<|endoftext|>" + doc + "<|endoftext|><|endoftext|>"}, options(262), &st);
    EXPECT_EQ(st.special_occurrences, 3u);
    // Uncut, "< |", "end", ... would occur 3 times and be merged too.
    EXPECT_EQ(spec.merges, (std::vector<std::string>{"a b", "ab ab"}));
    EXPECT_TRUE(st.stopped_early);
    EXPECT_EQ(spec.tokens.back(), "<|endoftext|>");
}

// The written file, loaded by the regular Tokenizer: random text round-trips exactly, special
// tokens are parsed, and the training text gets exactly the segmentation training ended with.
TEST(BpeTrainer, GgufRoundTripThroughTokenizer) {
    const std::string corpus = generated_corpus(4, 60000);
    BpeTrainStats st;
    const VocabSpec spec = train_on({corpus}, options(2000), &st);
    const std::string path = tmp_path("bpe_trainer_roundtrip.gguf");
    write_tokenizer_gguf(spec, path);

    const syslm::io::GGUFFile file(path);
    EXPECT_EQ(file.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(file.get_string("tokenizer.ggml.pre"), "gpt-2");
    const Tokenizer tok = Tokenizer::from_gguf(file);
    ASSERT_EQ(tok.n_vocab(), 2000);
    EXPECT_EQ(tok.eos(), 1999);
    EXPECT_EQ(tok.bos(), 1999);
    EXPECT_FALSE(tok.add_bos());
    EXPECT_TRUE(tok.is_control(1999));

    const auto ids = tok.encode(corpus, false, false);
    EXPECT_EQ(ids.size(), st.tokens);
    EXPECT_LT(ids.size() * 2, corpus.size());  // merges really happened
    EXPECT_EQ(tok.decode(ids), corpus);

    std::mt19937 rng(99);
    for (int i = 0; i < 300; ++i) {
        const size_t n = std::uniform_int_distribution<size_t>(0, 200)(rng);
        const std::string text = i % 4 == 3 ? random_bytes(rng, n) : random_unicode(rng, n);
        EXPECT_EQ(tok.decode(tok.encode(text, false, false)), text) << "case " << i;
    }
    const auto sp = tok.encode("the lord<|endoftext|>日本語", false, true);
    ASSERT_FALSE(sp.empty());
    EXPECT_EQ(std::count(sp.begin(), sp.end(), 1999), 1);
    EXPECT_EQ(tok.decode(sp), "the lord<|endoftext|>日本語");
}

// The target: an 8192 vocabulary from the whole KJV (4.4 MB) on one core, well under a
// minute (about 0.5 s here); the result is read back and compresses English several-fold.
TEST(BpeTrainer, KingJamesBible8192) {
    const std::string& text = kjv_text();
    ASSERT_FALSE(text.empty());
    const auto t0 = std::chrono::steady_clock::now();
    BpeTrainStats st;
    const VocabSpec spec = train_on({text}, options(8192), &st);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("KJV: %zu merges in %.2f s, %.3f bytes per token\n", st.merges, s,
                double(st.text_bytes) / st.tokens);
    EXPECT_LT(s, 20.0);
    EXPECT_EQ(spec.tokens.size(), 8192u);
    EXPECT_EQ(spec.merges[0], "t h");  // "th" is English's most frequent letter pair
    EXPECT_GT(double(st.text_bytes) / st.tokens, 3.5);

    const std::string path = tmp_path("bpe_trainer_kjv.gguf");
    write_tokenizer_gguf(spec, path);
    const Tokenizer tok = Tokenizer::from_gguf(syslm::io::GGUFFile(path));
    const auto ids = tok.encode(text, false, false);
    EXPECT_EQ(ids.size(), st.tokens);
    EXPECT_TRUE(tok.decode(ids) == text);
}

TEST(BpeTrainer, Errors) {
    expect_error([] { BpeTrainer t(options(256)); }, "vocabulary size 256 is too small");
    expect_error([] { BpeTrainer t(options(257, 2, {"<a>", "<b>"})); }, "at least 258");
    expect_error([] { BpeTrainer t(options(300, 2, {"<a>", ""})); }, "special token 2 is empty");
    expect_error([] { BpeTrainer t(options(300, 2, {"<a>", "<a>"})); }, "'<a>' is given twice");
    expect_error(
        [] {
            BpeTrainerOptions o = options(300);
            o.pre = "no-such-family";
            BpeTrainer t(o);
        },
        "unknown pre-tokenizer family 'no-such-family'");
    expect_error([] { BpeTrainer(options(300)).train(); }, "no training text");
    expect_error(
        [] {
            BpeTrainer t(options(300));
            t.add_text("");
            t.train();
        },
        "no training text");
    expect_error(
        [] {
            BpeTrainer t(options(300));
            t.add_text("<|endoftext|><|endoftext|>");
            t.train();
        },
        "nothing but special tokens");
    expect_error(
        [] {
            BpeTrainer t(options(300));
            t.add_text("abc abc");
            t.train();
            t.train();
        },
        "called once");
    // The special text "Ġx" (bytes C4 A0 78) never occurs in the text, but the learned token for
    // " x" is written "Ġx": the two could not be told apart in the vocabulary.
    expect_error([] { train_on({lines(" x", 4)}, options(258, 2, {"\xC4\xA0x"})); },
                 "same text as a learned token");
}
