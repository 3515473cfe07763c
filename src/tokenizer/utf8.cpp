#include "tokenizer/utf8.hpp"

namespace syslm::tokenizer {

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

std::string utf8_encode(uint32_t cp) {
    std::string s;
    append_utf8(s, cp);
    return s;
}

size_t utf8_decode(std::string_view s, size_t pos, uint32_t& cp) {
    auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
    const uint8_t b0 = byte(pos);
    if (b0 < 0x80) {
        cp = b0;
        return 1;
    }
    size_t n;
    uint32_t min;
    if ((b0 & 0xE0) == 0xC0) {
        n = 2, min = 0x80, cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
        n = 3, min = 0x800, cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
        n = 4, min = 0x10000, cp = b0 & 0x07;
    } else {
        return 0;
    }
    if (pos + n > s.size()) return 0;
    for (size_t i = 1; i < n; ++i) {
        const uint8_t b = byte(pos + i);
        if ((b & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

bool utf8_valid(std::string_view s) {
    uint32_t cp;
    for (size_t pos = 0; pos < s.size();) {
        const size_t n = utf8_decode(s, pos, cp);
        if (n == 0) return false;
        pos += n;
    }
    return true;
}

size_t utf8_incomplete_tail(std::string_view s) {
    // A sequence is at most 4 bytes, so only the last 3 bytes can hold an unfinished one.
    for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
        const uint8_t b = static_cast<uint8_t>(s[s.size() - back]);
        if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        const size_t need = b >= 0xC2 && b <= 0xF4 ? utf8_len_from_lead(b) : 1;
        if (need <= back) return 0;
        // Check that the bytes seen so far can still become a valid sequence.
        std::string probe(s.substr(s.size() - back));
        static constexpr char kPad[] = "\xBF\xBF\xBF";
        probe.append(kPad, need - back);
        // Pad with the continuation byte that keeps the value in range for every lead except
        // those whose second byte is restricted (E0, ED, F0, F4); try the other extreme too.
        uint32_t cp;
        if (utf8_decode(probe, 0, cp) == need) return back;
        for (size_t i = back; i < need; ++i) probe[i] = static_cast<char>(0x80);
        if (utf8_decode(probe, 0, cp) == need) return back;
        return 0;
    }
    return 0;
}

std::string Utf8StreamBuffer::push(std::string_view bytes) {
    pending_.append(bytes);
    const size_t hold = utf8_incomplete_tail(pending_);
    std::string ready = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return ready;
}

std::string Utf8StreamBuffer::flush() {
    std::string rest;
    rest.swap(pending_);
    return rest;
}

}  // namespace syslm::tokenizer
