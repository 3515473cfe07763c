// decode(encode(x)) == x on the King James Bible and on random Unicode, for both shared
// vocabularies.
//
// What is exact:
// - byte-level BPE (gpt-2): every byte string, valid UTF-8 or not, with or without special-token
//   parsing, BOS/EOS skipped by decode(..., skip_special=true).
// - SentencePiece (llama-spm): every byte string without U+2581 (SentencePiece's stand-in for a
//   space, which decodes to a space) when special tokens are not parsed. encode() adds one space
//   before the text (add_space_prefix) and decode() removes it again; a leading space of the text
//   itself survives. With parse_special, text right after a special token gains that space too
//   (llama.cpp and SentencePiece do the same), so that case is checked to differ exactly so.
#include <gtest/gtest.h>

#include <chrono>

#include "test_util.hpp"

using namespace syslm::tokenizer;
using syslm::tokenizer::test::kjv_text;
using syslm::tokenizer::test::random_bytes;
using syslm::tokenizer::test::random_unicode;
using syslm::tokenizer::test::shared_tokenizer;

namespace {

std::string without_spm_space(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s.compare(i, 3, "\xE2\x96\x81") == 0) {
            out += '_';
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

// Index of the first differing byte, for readable failures on multi-megabyte texts.
std::string first_difference(const std::string& a, const std::string& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) +
           ", first difference at byte " + std::to_string(i) + ": '" + a.substr(i, 40) + "' vs '" +
           b.substr(i, 40) + "'";
}

}  // namespace

TEST(RoundTrip, KingJamesBible) {
    const std::string& text = kjv_text();
    ASSERT_FALSE(text.empty());
    for (const char* name : {"gpt-2", "llama-spm"}) {
        SCOPED_TRACE(name);
        const Tokenizer& tok = shared_tokenizer(name);
        const auto t0 = std::chrono::steady_clock::now();
        const auto ids = tok.encode(text, false, false);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%s: KJV %zu bytes -> %zu tokens in %.3f s (%.2f MB/s)\n", name, text.size(),
                    ids.size(), s, text.size() / 1e6 / s);
        // A real tokenizer compresses English several-fold; a broken one emits bytes.
        EXPECT_LT(ids.size(), text.size() / 3);
        const std::string back = tok.decode(ids);
        EXPECT_TRUE(back == text) << first_difference(back, text);
        // With BOS (and special parsing) the text still comes back once BOS is skipped.
        const auto with_bos = tok.encode(text.substr(0, 20000), true, true);
        EXPECT_EQ(with_bos.front() == tok.bos(), tok.add_bos());
        EXPECT_EQ(tok.decode(with_bos, /*skip_special=*/true), text.substr(0, 20000));
    }
}

TEST(RoundTrip, RandomUnicodeBpe) {
    const Tokenizer& tok = shared_tokenizer("gpt-2");
    std::mt19937 rng(1234);
    for (int i = 0; i < 400; ++i) {
        const size_t n = std::uniform_int_distribution<size_t>(0, 300)(rng);
        const std::string text = random_unicode(rng, n);
        const bool parse_special = i % 2;
        const auto ids = tok.encode(text, false, parse_special);
        ASSERT_EQ(tok.decode(ids), text) << "case " << i;
        // Streaming: concatenated pieces are the same bytes.
        std::string pieces;
        for (int32_t id : ids) pieces += tok.token_to_piece(id);
        ASSERT_EQ(pieces, text);
    }
}

TEST(RoundTrip, RandomBytesBpe) {
    // Invalid UTF-8 is kept byte for byte (llama.cpp would turn it into U+FFFD).
    const Tokenizer& tok = shared_tokenizer("gpt-2");
    std::mt19937 rng(99);
    for (int i = 0; i < 300; ++i) {
        const std::string text =
            random_bytes(rng, std::uniform_int_distribution<size_t>(0, 200)(rng));
        ASSERT_EQ(tok.decode(tok.encode(text, false, false)), text) << "case " << i;
    }
}

TEST(RoundTrip, RandomUnicodeSpm) {
    const Tokenizer& tok = shared_tokenizer("llama-spm");
    std::mt19937 rng(4321);
    for (int i = 0; i < 400; ++i) {
        const size_t n = std::uniform_int_distribution<size_t>(0, 300)(rng);
        const std::string text = without_spm_space(random_unicode(rng, n));
        const auto ids = tok.encode(text, false, false);
        ASSERT_EQ(tok.decode(ids), text) << "case " << i;
        // token_to_piece keeps the prefix space: the stream is " " + text.
        std::string pieces;
        for (int32_t id : ids) pieces += tok.token_to_piece(id);
        ASSERT_EQ(pieces, text.empty() ? "" : " " + text);
    }
}

TEST(RoundTrip, RandomBytesSpm) {
    const Tokenizer& tok = shared_tokenizer("llama-spm");
    std::mt19937 rng(77);
    for (int i = 0; i < 300; ++i) {
        const std::string text = without_spm_space(
            random_bytes(rng, std::uniform_int_distribution<size_t>(0, 200)(rng)));
        ASSERT_EQ(tok.decode(tok.encode(text, false, false)), text) << "case " << i;
    }
}

TEST(RoundTrip, SpecialTokensBpe) {
    const Tokenizer& tok = shared_tokenizer("gpt-2");
    const std::string text = "one<|endoftext|>two <|endoftext|>\n<|endoftext|>";
    const auto parsed = tok.encode(text, false, true);
    EXPECT_EQ(std::count(parsed.begin(), parsed.end(), 50256), 3);
    EXPECT_EQ(tok.decode(parsed), text);
    EXPECT_EQ(tok.decode(parsed, /*skip_special=*/true), "onetwo \n");
    const auto plain = tok.encode(text, false, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
    EXPECT_EQ(tok.decode(plain), text);
}

TEST(RoundTrip, SpecialTokensSpm) {
    const Tokenizer& tok = shared_tokenizer("llama-spm");
    const auto ids = tok.encode("Hi</s>there", true, true);
    ASSERT_EQ(ids.front(), tok.bos());
    EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eos()), 1);
    // The text after </s> gets SentencePiece's prefix space, as in llama.cpp.
    EXPECT_EQ(tok.decode(ids), "<s>Hi</s> there");
    EXPECT_EQ(tok.decode(ids, true), "Hi there");
    EXPECT_EQ(tok.decode(tok.encode("Hi</s>there", true, false), true), "Hi</s>there");
}
