#include "tokenizer/byte_level.hpp"

#include <array>

#include "tokenizer/utf8.hpp"

namespace syslm::tokenizer {
namespace {

struct ByteTables {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 324> to_byte{};  // code points 0..323 cover the whole alphabet
    std::array<std::string, 256> utf8;

    ByteTables() {
        to_byte.fill(-1);
        auto printable = [](int b) {
            return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        };
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next++;
            to_cp[b] = cp;
            to_byte[cp] = static_cast<int16_t>(b);
            utf8[b] = utf8_encode(cp);
        }
    }
};

const ByteTables& tables() {
    static const ByteTables t;
    return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) {
    return tables().to_cp[b];
}

int codepoint_to_byte(uint32_t cp) {
    return cp < tables().to_byte.size() ? tables().to_byte[cp] : -1;
}

std::string byte_level_encode(std::string_view bytes) {
    const auto& t = tables();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) out += t.utf8[static_cast<uint8_t>(c)];
    return out;
}

std::string byte_level_decode(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        uint32_t cp;
        const size_t n = utf8_decode(text, pos, cp);
        if (n == 0) {  // not UTF-8: keep the raw byte
            out.push_back(text[pos++]);
            continue;
        }
        const int b = codepoint_to_byte(cp);
        if (b >= 0) {
            out.push_back(static_cast<char>(b));
        } else {
            out.append(text.substr(pos, n));
        }
        pos += n;
    }
    return out;
}

}  // namespace syslm::tokenizer
