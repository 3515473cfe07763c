// GPT-2's byte-level alphabet: every byte 0..255 maps to one printable code point, so that BPE
// vocabularies can be stored as text. Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map
// to themselves; the other 68 bytes map to U+0100.. in byte order (space -> 'Ġ', '\n' -> 'Ċ').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace syslm::tokenizer {

uint32_t byte_to_codepoint(uint8_t b);
// The byte a code point stands for, or -1 if it is not part of the alphabet.
int codepoint_to_byte(uint32_t cp);

// UTF-8 text of the byte-level form of `bytes` (each byte becomes one code point).
std::string byte_level_encode(std::string_view bytes);

// Inverse of byte_level_encode. Code points outside the alphabet (added tokens stored as plain
// text, invalid UTF-8) are copied through unchanged, so nothing is ever lost.
std::string byte_level_decode(std::string_view text);

}  // namespace syslm::tokenizer
