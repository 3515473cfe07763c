// UTF-8 helpers and GPT-2's byte-level alphabet.
#include <gtest/gtest.h>

#include <random>

#include "test_util.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/utf8.hpp"

using namespace syslm::tokenizer;

TEST(Utf8, DecodeAcceptsOnlyWellFormedSequences) {
    uint32_t cp = 0;
    EXPECT_EQ(utf8_decode("A", 0, cp), 1u);
    EXPECT_EQ(cp, 0x41u);
    EXPECT_EQ(utf8_decode("\xC3\xA9", 0, cp), 2u);
    EXPECT_EQ(cp, 0xE9u);
    EXPECT_EQ(utf8_decode("\xE2\x96\x81", 0, cp), 3u);
    EXPECT_EQ(cp, 0x2581u);
    EXPECT_EQ(utf8_decode("\xF0\x9F\xA6\x99", 0, cp), 4u);
    EXPECT_EQ(cp, 0x1F999u);
    EXPECT_EQ(utf8_decode("\xF4\x8F\xBF\xBF", 0, cp), 4u);  // U+10FFFF
    for (const char* bad :
         {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
          "\xF8\x88\x80\x80\x80", "\xC3", "\xE2\x96", "\xC3\x41", "\xFF"})
        EXPECT_EQ(utf8_decode(bad, 0, cp), 0u) << "accepted an invalid sequence";
}

TEST(Utf8, EncodeDecodeEveryCodePoint) {
    for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        const std::string s = utf8_encode(cp);
        uint32_t back = 0;
        ASSERT_EQ(utf8_decode(s, 0, back), s.size());
        ASSERT_EQ(back, cp);
    }
}

TEST(Utf8, IncompleteTail) {
    EXPECT_EQ(utf8_incomplete_tail(""), 0u);
    EXPECT_EQ(utf8_incomplete_tail("ab"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("a\xC3"), 1u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE2\x96"), 2u);
    EXPECT_EQ(utf8_incomplete_tail("a\xF0\x9F\xA6"), 3u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE2\x96\x81"), 0u);  // complete
    EXPECT_EQ(utf8_incomplete_tail("a\xED\xA0"), 0u);      // would be a surrogate: never valid
    EXPECT_EQ(utf8_incomplete_tail("a\xE0\x80"), 0u);      // overlong: never valid
    EXPECT_EQ(utf8_incomplete_tail("a\x80"), 0u);          // stray continuation byte
}

TEST(Utf8, StreamBufferNeverSplitsACharacter) {
    std::mt19937 rng(5);
    for (int i = 0; i < 200; ++i) {
        const std::string text = test::random_unicode(rng, 80);
        Utf8StreamBuffer buf;
        std::string out;
        for (size_t pos = 0; pos < text.size();) {
            const size_t n = std::uniform_int_distribution<size_t>(1, 5)(rng);
            const std::string chunk = buf.push(std::string_view(text).substr(pos, n));
            ASSERT_TRUE(utf8_valid(chunk)) << "emitted part of a character";
            out += chunk;
            pos += n;
        }
        out += buf.flush();
        ASSERT_EQ(out, text);
    }
    // Invalid bytes pass through instead of being held forever.
    Utf8StreamBuffer buf;
    EXPECT_EQ(buf.push("a\xFF"), "a\xFF");
    EXPECT_EQ(buf.push("\xC3"), "");
    EXPECT_EQ(buf.flush(), "\xC3");
}

TEST(ByteLevel, MatchesGpt2Alphabet) {
    // GPT-2's bytes_to_unicode: printable Latin-1 maps to itself, the rest to U+0100.. in order.
    EXPECT_EQ(byte_to_codepoint('A'), uint32_t('A'));
    EXPECT_EQ(byte_to_codepoint(0x00), 0x100u);
    EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);  // 'Ċ'
    EXPECT_EQ(byte_to_codepoint(' '), 0x120u);   // 'Ġ'
    EXPECT_EQ(byte_to_codepoint(0x7F), 0x121u);
    EXPECT_EQ(byte_to_codepoint(0xA0), 0x142u);
    EXPECT_EQ(byte_to_codepoint(0xAD), 0x143u);
    EXPECT_EQ(byte_to_codepoint(0xFF), 0xFFu);
    for (int b = 0; b < 256; ++b)
        EXPECT_EQ(codepoint_to_byte(byte_to_codepoint(static_cast<uint8_t>(b))), b);
    EXPECT_EQ(codepoint_to_byte(0x20), -1);
    EXPECT_EQ(codepoint_to_byte(0x4E00), -1);
}

TEST(ByteLevel, AgreesWithTheGpt2Vocabulary) {
    // In GPT-2's encoder.json, ids 0..255 are the 256 byte characters: first the printable bytes
    // in byte order, then the remapped ones, i.e. code points sorted by the byte they stand for
    // within each group. Checking every id ties our table to the real file.
    const Tokenizer& tok = test::shared_tokenizer("gpt-2");
    std::vector<int> order;
    for (int b = 0; b < 256; ++b)
        if (byte_to_codepoint(static_cast<uint8_t>(b)) == static_cast<uint32_t>(b))
            order.push_back(b);
    for (int b = 0; b < 256; ++b)
        if (byte_to_codepoint(static_cast<uint8_t>(b)) != static_cast<uint32_t>(b))
            order.push_back(b);
    for (int id = 0; id < 256; ++id) {
        EXPECT_EQ(tok.token_text(id),
                  utf8_encode(byte_to_codepoint(static_cast<uint8_t>(order[id]))));
        EXPECT_EQ(tok.token_to_piece(id), std::string(1, static_cast<char>(order[id])));
    }
}

TEST(ByteLevel, EncodeDecodeRoundTrip) {
    std::mt19937 rng(3);
    for (int i = 0; i < 100; ++i) {
        const std::string bytes = test::random_bytes(rng, i * 7);
        const std::string enc = byte_level_encode(bytes);
        ASSERT_TRUE(utf8_valid(enc));
        ASSERT_EQ(byte_level_decode(enc), bytes);
    }
    // Text outside the alphabet (added tokens stored verbatim) passes through.
    EXPECT_EQ(byte_level_decode("\xC4\xA0x 世"), " x 世");
}
