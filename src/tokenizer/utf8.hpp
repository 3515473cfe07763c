// UTF-8 helpers shared by the tokenizers. Tokenizers work on bytes: text that is not valid UTF-8
// must still tokenize and detokenize losslessly, so nothing here throws on bad input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace syslm::tokenizer {

// Length of the sequence a lead byte announces (1 for ASCII and for stray continuation bytes),
// as llama.cpp's unicode_len_utf8: SentencePiece splits its input into symbols this way.
inline size_t utf8_len_from_lead(uint8_t lead) {
    static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return kLen[lead >> 4];
}

// Appends the UTF-8 encoding of code point `cp` (must be <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cp);
std::string utf8_encode(uint32_t cp);

// Decodes one well-formed code point at `s[pos]` (shortest form, no surrogates). Returns its
// length in bytes and sets `cp`, or returns 0 when the bytes there are not valid UTF-8.
size_t utf8_decode(std::string_view s, size_t pos, uint32_t& cp);

bool utf8_valid(std::string_view s);

// Number of bytes at the end of `s` that start a UTF-8 sequence which is still incomplete
// (a prefix of a valid sequence); 0 when `s` ends on a character boundary.
size_t utf8_incomplete_tail(std::string_view s);

// Streams token pieces to a terminal: a token may end in the middle of a multi-byte character,
// so bytes are held back until the character is complete. Invalid bytes are passed through.
class Utf8StreamBuffer {
public:
    // Returns the bytes that are ready to print (everything but an incomplete trailing sequence).
    std::string push(std::string_view bytes);
    // Returns whatever is held back (an incomplete sequence at the end of the stream).
    std::string flush();

private:
    std::string pending_;
};

}  // namespace syslm::tokenizer
