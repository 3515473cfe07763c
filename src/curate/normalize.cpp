#include "curate/normalize.hpp"

#include <cstring>

namespace syslm::curate {

std::string normalize_text(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool space = true;  // no leading space
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        char keep = 0;
        if (c >= 'A' && c <= 'Z')
            keep = static_cast<char>(c - 'A' + 'a');
        else if ((c >= 'a' && c <= 'z') || c >= 0x80)
            keep = ch;
        if (keep) {
            out += keep;
            space = false;
        } else if (!space) {
            out += ' ';
            space = true;
        }
    }
    if (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

std::vector<std::string_view> split_words(std::string_view normalized) {
    std::vector<std::string_view> words;
    size_t begin = 0;
    while (begin < normalized.size()) {
        size_t end = normalized.find(' ', begin);
        if (end == std::string_view::npos) end = normalized.size();
        if (end > begin) words.push_back(normalized.substr(begin, end - begin));
        begin = end + 1;
    }
    return words;
}

std::vector<std::pair<size_t, size_t>> word_spans(std::string_view text) {
    std::vector<std::pair<size_t, size_t>> w;
    size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && is_space(text[i])) ++i;
        const size_t b = i;
        while (i < text.size() && !is_space(text[i])) ++i;
        if (i > b) w.emplace_back(b, i);
    }
    return w;
}

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

}  // namespace

uint64_t hash_bytes(std::string_view s, uint64_t seed) {
    uint64_t h = mix(seed + 0x9e3779b97f4a7c15ULL * (s.size() + 1));
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        h = (h ^ mix(w)) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    std::memcpy(&tail, s.data() + i, s.size() - i);
    h = (h ^ mix(tail ^ (static_cast<uint64_t>(s.size() - i) << 56))) * 0x9e3779b97f4a7c15ULL;
    return mix(h);
}

}  // namespace syslm::curate
