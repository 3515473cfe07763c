// Helpers shared by the tokenizer tests: loading the shared vocabularies, the KJV text, and
// random Unicode strings.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "io/gguf.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::tokenizer::test {

// tests/fixtures/vocab/ggml-vocab-<name>.gguf
inline std::string shared_vocab_path(const std::string& name) {
    return std::string(SYSLM_VOCAB_DIR) + "/ggml-vocab-" + name + ".gguf";
}

// Loaded once per process.
inline const Tokenizer& shared_tokenizer(const std::string& name) {
    static std::mutex mu;
    static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
    std::lock_guard lock(mu);
    auto& slot = cache[name];
    if (!slot) {
        const io::GGUFFile file(shared_vocab_path(name));
        slot = std::make_unique<Tokenizer>(Tokenizer::from_gguf(file));
    }
    return *slot;
}

// The King James Bible from the Debian package bible-kjv (`bible -f ...`). Fails the current
// test, saying what to install, when the command is missing.
inline const std::string& kjv_text() {
    static const std::string text = [] {
        std::string out;
        FILE* p = popen("bible -f 'Genesis1:1-Revelation22:21' 2>/dev/null", "r");
        if (!p) return out;
        char buf[1 << 16];
        for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
        if (pclose(p) != 0) out.clear();
        return out;
    }();
    if (text.size() < 4'000'000)
        ADD_FAILURE() << "the KJV text could not be read with `bible -f "
                         "'Genesis1:1-Revelation22:21'` (got "
                      << text.size()
                      << " bytes): install the Debian package bible-kjv (apt-get install "
                         "bible-kjv)";
    return text;
}

namespace detail {

struct Range {
    uint32_t lo, hi;
};

// Pools of code points; each string draws from them with the weights below.
const std::vector<Range> kWhitespace = {{0x09, 0x0D},     {0x20, 0x20},     {0x85, 0x85},
                                        {0xA0, 0xA0},     {0x1680, 0x1680}, {0x180E, 0x180E},
                                        {0x2000, 0x200B}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                        {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const std::vector<Range> kControls = {{0x00, 0x08}, {0x0E, 0x1F}, {0x7F, 0x9F}};
const std::vector<Range> kCombining = {
    {0x0300, 0x036F}, {0x1AB0, 0x1AFF}, {0x20D0, 0x20FF}, {0xFE20, 0xFE2F}};
const std::vector<Range> kEmoji = {{0x1F300, 0x1F64F}, {0x1F680, 0x1F6FF}, {0x1F900, 0x1FAFF},
                                   {0x2600, 0x27BF},   {0x200D, 0x200D},   {0xFE0F, 0xFE0F},
                                   {0x1F3FB, 0x1F3FF}};
const std::vector<Range> kCjk = {{0x4E00, 0x9FFF}, {0x3400, 0x4DBF}, {0x20000, 0x2A6DF},
                                 {0x3040, 0x30FF}, {0xAC00, 0xD7A3}, {0xFF01, 0xFF5E},
                                 {0x3000, 0x303F}};
const std::vector<Range> kScripts = {{0x0600, 0x06FF}, {0x0900, 0x097F}, {0x0E00, 0x0E7F},
                                     {0x0400, 0x04FF}, {0x0370, 0x03FF}, {0x0590, 0x05FF},
                                     {0x1780, 0x17FF}, {0x00C0, 0x024F}, {0x1E00, 0x1FFF}};
const std::vector<Range> kDigits = {{'0', '9'},        {0x0660, 0x0669}, {0x0966, 0x096F},
                                    {0xFF10, 0xFF19},  {0x2160, 0x2188}, {0x00B2, 0x00B3},
                                    {0x1D7CE, 0x1D7FF}};
const std::vector<Range> kAscii = {{0x20, 0x7E}};

inline uint32_t pick(std::mt19937& rng, const std::vector<Range>& pool) {
    const Range& r = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    return std::uniform_int_distribution<uint32_t>(r.lo, r.hi)(rng);
}

}  // namespace detail

// Random text mixing every kind of code point a tokenizer meets: ASCII, whitespace of all kinds
// and runs of it, C0/C1 controls, combining marks, emoji with ZWJ and variation selectors, CJK
// (planes 0 and 2), Hangul, Arabic, Devanagari, Thai, digits of several scripts, contractions,
// and code points drawn uniformly from all 17 planes (unassigned and private use included).
// Always valid UTF-8 (no surrogates).
inline std::string random_unicode(std::mt19937& rng, size_t n_codepoints) {
    static const char* kSnippets[] = {
        "'s",   "'t", "'re",  "'ve",    "'m",  "'ll", "'d", "'S", "'LL",    "don't", "y'all", " \n",
        "\r\n", "  ", "\t\t", "\n\n\n", "...", "!!",  "<|", "|>", "123456", "3.14",  "    "};
    std::string s;
    std::uniform_int_distribution<int> kind(0, 99);
    size_t n = 0;
    while (n < n_codepoints) {
        const int k = kind(rng);
        uint32_t cp;
        if (k < 30) {
            cp = detail::pick(rng, detail::kAscii);
        } else if (k < 38) {
            // A run of one kind of whitespace, of awkward length.
            cp = detail::pick(rng, detail::kWhitespace);
            const int run = std::uniform_int_distribution<int>(1, 7)(rng);
            for (int i = 0; i < run; ++i) append_utf8(s, cp);
            n += run;
            continue;
        } else if (k < 42) {
            cp = detail::pick(rng, detail::kControls);
        } else if (k < 48) {
            cp = detail::pick(rng, detail::kCombining);
        } else if (k < 56) {
            cp = detail::pick(rng, detail::kEmoji);
        } else if (k < 66) {
            cp = detail::pick(rng, detail::kCjk);
        } else if (k < 76) {
            cp = detail::pick(rng, detail::kScripts);
        } else if (k < 82) {
            cp = detail::pick(rng, detail::kDigits);
        } else if (k < 90) {
            const char* snip =
                kSnippets[std::uniform_int_distribution<size_t>(0, std::size(kSnippets) - 1)(rng)];
            s += snip;
            n += std::string_view(snip).size();
            continue;
        } else {
            // Anywhere in the 17 planes, surrogates excluded.
            do {
                cp = std::uniform_int_distribution<uint32_t>(0, 0x10FFFF)(rng);
            } while (cp >= 0xD800 && cp <= 0xDFFF);
        }
        append_utf8(s, cp);
        ++n;
    }
    return s;
}

// Random bytes, valid UTF-8 or not.
inline std::string random_bytes(std::mt19937& rng, size_t n) {
    std::string s(n, '\0');
    std::uniform_int_distribution<int> byte(0, 255);
    for (char& c : s) c = static_cast<char>(byte(rng));
    return s;
}

}  // namespace syslm::tokenizer::test
