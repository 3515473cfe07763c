// Pre-tokenizer regexes: hand-derived splits for each family (from the regex semantics of the
// model's tokenizer.json), the Unicode White_Space rewrite, lossless cover of arbitrary bytes,
// and errors for unknown families and bad regexes.
#include <gtest/gtest.h>

#include <random>

#include "core/error.hpp"
#include "test_util.hpp"
#include "tokenizer/pre_tokenizer.hpp"

using namespace syslm::tokenizer;
using Pieces = std::vector<std::string>;

namespace {

Pieces split(const std::string& family, const std::string& text) {
    const PreTokenizerConfig* cfg = find_pre_tokenizer(family);
    if (!cfg) throw std::runtime_error("no family " + family);
    const PreTokenizer pre(cfg->regexes);
    std::vector<std::string_view> views;
    pre.split(text, views);
    return Pieces(views.begin(), views.end());
}

}  // namespace

TEST(PreTokenizer, Gpt2) {
    EXPECT_EQ(split("gpt-2", "Hello, y'all!  How\n\nare you're 42x"),
              (Pieces{"Hello", ",", " y", "'", "all", "!", " ", " How", "\n", "\n", "are", " you",
                      "'re", " 42", "x"}));
    // A whitespace run keeps its last character for the next word; at the end it stays whole.
    EXPECT_EQ(split("gpt-2", "a   b   "), (Pieces{"a", "  ", " b", "   "}));
    // Contractions are case-sensitive in GPT-2.
    EXPECT_EQ(split("gpt-2", "I'M"), (Pieces{"I", "'", "M"}));
    // The same regex serves GPT-NeoX-style families.
    for (const char* f : {"mpt", "olmo", "phi-2", "roberta-bpe"})
        EXPECT_EQ(split(f, "x  y's"), (Pieces{"x", " ", " y", "'s"})) << f;
}

TEST(PreTokenizer, Llama3) {
    EXPECT_EQ(split("llama-bpe", "I'M 12345 ok\r\n\r\nx"),
              (Pieces{"I", "'M", " ", "123", "45", " ok", "\r\n\r\n", "x"}));
    // A non-letter, non-digit character (not a newline) may lead a word.
    EXPECT_EQ(split("llama3", "(hello) $5"), (Pieces{"(hello", ")", " $", "5"}));
    EXPECT_EQ(split("llama3", "  \n  a"), (Pieces{"  \n", " ", " a"}));
}

TEST(PreTokenizer, Qwen2SplitsDigitsOneByOne) {
    EXPECT_EQ(split("qwen2", "ab 2024!\n"), (Pieces{"ab", " ", "2", "0", "2", "4", "!\n"}));
    EXPECT_EQ(split("deepseek-r1-qwen", "x12"), (Pieces{"x", "1", "2"}));
}

TEST(PreTokenizer, StarCoderSplitsDigitsThenGpt2) {
    for (const char* f : {"starcoder", "refact", "smollm", "command-r", "codeshell"})
        EXPECT_EQ(split(f, "x=42 y"), (Pieces{"x", "=", "4", "2", " y"})) << f;
}

TEST(PreTokenizer, DeepSeekCoderSequence) {
    EXPECT_EQ(split("deepseek-coder", "ab, 12\n"), (Pieces{"ab", ",", " ", "1", "2", "\n"}));
    // CJK runs are split from the rest.
    EXPECT_EQ(split("deepseek-coder", "我想a"), (Pieces{"我想", "a"}));
}

TEST(PreTokenizer, DeepSeekLlmSequence) {
    // Letters (with one leading whitespace), ASCII/full-width punctuation runs, CJK, digit runs.
    EXPECT_EQ(split("deepseek-llm", "Hi, 世界 123\n"),
              (Pieces{"Hi", ",", " ", "世界", " ", "123", "\n"}));
}

TEST(PreTokenizer, FalconSequence) {
    // Punctuation runs first, then GPT-2, then three-digit groups.
    EXPECT_EQ(split("falcon", "a+=b 12345"), (Pieces{"a", "+=", "b", " ", "123", "45"}));
}

TEST(PreTokenizer, DefaultSequence) {
    EXPECT_EQ(split("default", "x, 12345"), (Pieces{"x", ",", " ", "123", "45"}));
}

TEST(PreTokenizer, UnicodeWhiteSpace) {
    // \s is Unicode White_Space, as in HF tokenizers: U+0085 is whitespace, U+180E is not
    // (PCRE2's own \s would take U+180E, and split "\u180E\u180Ea" into three pieces).
    EXPECT_EQ(split("gpt-2", "\u180E\u180Ea"), (Pieces{"\u180E\u180E", "a"}));
    EXPECT_EQ(split("gpt-2", "\u0085\u0085a"), (Pieces{"\u0085", "\u0085", "a"}));
    EXPECT_EQ(split("gpt-2", "a\u3000\u3000b"), (Pieces{"a", "\u3000", "\u3000", "b"}));
    EXPECT_EQ(rewrite_whitespace_classes(R"(\s+(?!\S)|[^\s\p{L}]|\\s)"),
              R"([\t\n\x0B\f\r\x{85}\p{Z}]+(?![^\t\n\x0B\f\r\x{85}\p{Z}])|)"
              R"([^\t\n\x0B\f\r\x{85}\p{Z}\p{L}]|\\s)");
    EXPECT_THROW(rewrite_whitespace_classes(R"([^\S])"), syslm::Error);
}

TEST(PreTokenizer, CaseInsensitiveContractionsUseUnicodeFolding) {
    // llama3's tokenizer.json has (?i:'s|...); with Unicode case folding the long s (U+017F)
    // folds to s, as in the Rust regex engines of tiktoken and HF tokenizers. Without the
    // contraction, "'\u017Fa" would be one word (a non-letter leading letters).
    EXPECT_EQ(split("llama3", "it'Sa"), (Pieces{"it", "'S", "a"}));
    EXPECT_EQ(split("llama3", "x'\u017Fa"), (Pieces{"x", "'\u017F", "a"}));
    EXPECT_EQ(split("llama3", "x'xa"), (Pieces{"x", "'xa"}));
}

TEST(PreTokenizer, InvalidUtf8IsKeptInGaps) {
    EXPECT_EQ(split("gpt-2",
                    "ab\xFF\xFE"
                    "cd \xC3"),
              (Pieces{"ab", "\xFF\xFE", "cd", " ", "\xC3"}));
}

TEST(PreTokenizer, PiecesCoverEveryInputExactly) {
    std::mt19937 rng(7);
    for (const std::string& name : known_pre_tokenizer_names()) {
        SCOPED_TRACE(name);
        const PreTokenizer pre(find_pre_tokenizer(name)->regexes);
        for (int i = 0; i < 60; ++i) {
            const std::string text =
                i % 2 ? test::random_unicode(rng, 1 + i * 5) : test::random_bytes(rng, 1 + i * 3);
            std::vector<std::string_view> pieces;
            pre.split(text, pieces);
            std::string joined;
            for (auto p : pieces) {
                ASSERT_FALSE(p.empty());
                joined += p;
            }
            ASSERT_EQ(joined, text);
        }
    }
}

TEST(PreTokenizer, LongWhitespaceRunsDoNotOverflow) {
    // Backtracking over a long run must not exhaust the JIT stack.
    const std::string text = "a" + std::string(200000, ' ') + "b" + std::string(100000, '\n');
    for (const char* f : {"gpt-2", "llama3", "qwen2", "deepseek-llm"}) {
        const Pieces p = split(f, text);
        std::string joined;
        for (const auto& s : p) joined += s;
        EXPECT_EQ(joined, text) << f;
    }
}

TEST(PreTokenizer, UnknownFamilyAndBadRegex) {
    EXPECT_EQ(find_pre_tokenizer("no-such-family"), nullptr);
    ASSERT_NE(find_pre_tokenizer("llama-v3"), nullptr);
    EXPECT_EQ(find_pre_tokenizer("llama-v3")->name, "llama3");
    try {
        PreTokenizer({"(unclosed"});
        FAIL() << "expected an Error";
    } catch (const syslm::Error& e) {
        EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos) << e.what();
    }
}
