// The grammar layer on its own: GBNF parsing (and its errors), the matcher on hand-written
// sentences and non-sentences (JSON, arithmetic, UTF-8 classes, repetition bounds), and the
// token mask of the vocabulary trie against a brute-force scan of every token on random states.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "grammar/gbnf.hpp"
#include "grammar/json.hpp"
#include "grammar/matcher.hpp"
#include "grammar/token_masks.hpp"

namespace syslm::grammar {
namespace {

std::shared_ptr<const Grammar> gbnf(std::string_view text) {
    return std::make_shared<const Grammar>(parse_gbnf(text));
}

// Whether the whole of s is a sentence of g.
bool sentence(const std::shared_ptr<const Grammar>& g, std::string_view s) {
    Matcher m(g);
    return m.accept(s) && m.can_end();
}

// Whether s can be continued into a sentence (every prefix of a sentence can).
bool prefix(const std::shared_ptr<const Grammar>& g, std::string_view s) {
    Matcher m(g);
    return m.accept(s);
}

TEST(Gbnf, JsonAcceptsDocumentsAndRefusesOthers) {
    const auto g = gbnf(json_object_gbnf());
    for (const char* ok : {"{}", "{\"a\": 1}", "{\"a\":[1, -2.5e3, true, null, \"x\\n\\u00e9\"]}",
                           "{\"nested\": {\"deep\": [[], {}]}} ",
                           "{\"k\": \"h\xc3\xa9llo \xe2\x82\xac\"}", "{\n  \"a\": 0}"})
        EXPECT_TRUE(sentence(g, ok)) << ok;
    for (const char* bad : {"[]", "{\"a\" 1}", "{\"a\": 01}", "{'a': 1}", "{\"a\": tru}",
                            "{\"a\": \"\x01\"}", "{\"a\": 1,}", "{\"a\": \"\\q\"}"})
        EXPECT_FALSE(sentence(g, bad)) << bad;
    EXPECT_TRUE(prefix(g, "{\"a\": [1, 2"));
    EXPECT_FALSE(prefix(g, "{\"a\": ]"));
    Matcher m(g);
    ASSERT_TRUE(m.accept(std::string_view("{}")));
    EXPECT_TRUE(m.can_end());
    EXPECT_TRUE(m.accept(' '));  // bounded trailing whitespace is still allowed
    EXPECT_FALSE(m.accept('{'));
}

TEST(Gbnf, ArithmeticRepetitionAndGroups) {
    const auto g = gbnf(R"g(
# llama.cpp's arithmetic example, written again
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)g");
    EXPECT_TRUE(sentence(g, "1+2=3\n"));
    EXPECT_TRUE(sentence(g, "(a+b)*c= x\n1=1\n"));
    EXPECT_FALSE(sentence(g, "1+=3\n"));
    EXPECT_FALSE(sentence(g, ""));  // + needs one
    const auto bounded = gbnf(R"(root ::= "a"{2,4} "b"? [xy]{3})");
    EXPECT_TRUE(sentence(bounded, "aaxyx"));
    EXPECT_TRUE(sentence(bounded, "aaaabyyy"));
    EXPECT_FALSE(sentence(bounded, "axyx"));
    EXPECT_FALSE(sentence(bounded, "aaaaaxyx"));
    EXPECT_FALSE(sentence(bounded, "aabbxyx"));
    EXPECT_FALSE(sentence(bounded, "aaxy"));
}

TEST(Gbnf, UnicodeClassesAndPartialCharacters) {
    const auto g = gbnf(R"(root ::= [α-ω]+ [^a-z\u00e9] "€")");
    EXPECT_FALSE(sentence(g, "λόγαX€"));  // ό is outside α-ω
    EXPECT_TRUE(sentence(g, "λγα!€"));
    EXPECT_FALSE(sentence(g, "λγαé€"));
    EXPECT_FALSE(sentence(g, "λγαz€"));
    Matcher m(g);
    EXPECT_TRUE(m.accept(static_cast<uint8_t>(0xCE)));   // the first byte of U+0380..U+03BF
    EXPECT_FALSE(m.accept(static_cast<uint8_t>(0x80)));  // U+0380: not a Greek small letter
    EXPECT_TRUE(m.accept(static_cast<uint8_t>(0xB1)));   // α
    EXPECT_FALSE(m.can_end());
    Matcher n(g);
    EXPECT_FALSE(n.accept(static_cast<uint8_t>(0xD0)));  // Cyrillic: no Greek letter starts so
    EXPECT_FALSE(n.accept(static_cast<uint8_t>(0xFF)));  // never UTF-8
    EXPECT_FALSE(sentence(gbnf(R"(root ::= .)"), "\xed\xa0\x80"));  // a surrogate
    // Overlong forms are not UTF-8: a quote may not start with a 3- or 4-byte lead byte, nor
    // end one.
    Matcher quote(gbnf(R"(root ::= "\"" .)"));
    EXPECT_FALSE(quote.accept(static_cast<uint8_t>(0xE0)));
    EXPECT_FALSE(quote.accept(static_cast<uint8_t>(0xF0)));
    EXPECT_TRUE(quote.accept(static_cast<uint8_t>('"')));
    EXPECT_FALSE(Matcher(quote).accept(std::string_view("\xe0\x80\xa2")));
    EXPECT_TRUE(Matcher(quote).accept(std::string_view("\xe0\xa0\x80")));  // U+0800
}

TEST(Gbnf, ErrorsNameTheRuleOrThePlace) {
    const auto says = [](std::string_view text, const std::string& what) {
        try {
            parse_gbnf(text);
            ADD_FAILURE() << "accepted: " << text;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    says("root ::= item", "'item', which is not defined");
    says("start ::= \"a\"", "no rule 'root'");
    says("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "'expr' is left-recursive");
    says("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", "left-recursive");
    says("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    says("root ::= \"a\" (\"b\"", "line 1, column 18: expected ')'");
    says("root ::= [z-a]", "reversed");
    says("root ::= \"a\"{3,2}", "n < m");
    says("root ::= \"\\q\"", "unknown escape");
}

// A vocabulary of ASCII characters, JSON-ish multi-byte pieces, UTF-8 characters and pieces that
// split one, and empty (control) tokens.
std::vector<std::string> test_vocabulary(std::mt19937& rng) {
    std::vector<std::string> v{""};  // 0: a control token
    for (int c = 1; c < 128; ++c) v.emplace_back(1, static_cast<char>(c));
    for (const char* p :
         {"{\"",  "\":",      "\": ", ", \"",   "\"}",      "true", "false",
          "null", "12",       "-0.5", "e+",     "\\u00",    "\\n",  "]}",
          "[{",   "\xc3\xa9", "\xc3", "\xa9\"", "\xe2\x82", "\xac", "\xf0\x9f\x98\x80",
          " \n",  "  "})
        v.emplace_back(p);
    const std::string alphabet = "{}[]\":, abtrue0129.-e\\n";
    for (int i = 0; i < 300; ++i) {
        std::string s;
        for (int k = 0, n = 2 + static_cast<int>(rng() % 5); k < n; ++k)
            s += alphabet[rng() % alphabet.size()];
        v.push_back(s);
    }
    v.emplace_back();  // an end token's own piece is never matched as text
    return v;
}

TEST(TokenMasks, TheTrieWalkEqualsABruteForceScanOnRandomStates) {
    std::mt19937 rng(7);
    const std::vector<std::string> vocab = test_vocabulary(rng);
    const int32_t eos = static_cast<int32_t>(vocab.size()) - 1;
    const VocabTrie trie(vocab, {eos});
    MaskCache cache(trie, 64);
    const auto g = gbnf(json_object_gbnf());
    int states = 0, ends = 0;
    for (int run = 0; run < 40; ++run) {
        Matcher m(g);
        for (int step = 0; step < 60; ++step) {
            // Brute force: every token's piece through a copy of the state.
            TokenMask want((vocab.size() + 63) / 64, 0);
            for (size_t t = 0; t < vocab.size(); ++t) {
                Matcher c = m;
                const bool ok = t == static_cast<size_t>(eos)
                                    ? m.can_end()
                                    : !vocab[t].empty() && c.accept(vocab[t]);
                if (ok) want[t >> 6] |= uint64_t{1} << (t & 63);
            }
            const TokenMask& got = cache.mask(m);
            ASSERT_EQ(got, want) << "run " << run << " step " << step;
            ++states;
            ends += allowed(got, eos);
            // Go on with a random allowed token (not the end).
            std::vector<int32_t> ok;
            for (int32_t t = 0; t < eos; ++t)
                if (allowed(got, t)) ok.push_back(t);
            if (ok.empty()) break;
            ASSERT_TRUE(m.accept(vocab[static_cast<size_t>(ok[rng() % ok.size()])]));
        }
    }
    EXPECT_GT(states, 1000);
    EXPECT_GT(ends, 0);
    EXPECT_GT(cache.hits(), 0);
}

}  // namespace
}  // namespace syslm::grammar
