#include "grammar/regex.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace syslm::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr uint32_t kMax = 0x10FFFF;

Ranges normalize(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (const auto& x : r) {
        if (!out.empty() && x.first <= out.back().second + 1)
            out.back().second = std::max(out.back().second, x.second);
        else
            out.push_back(x);
    }
    return out;
}

Ranges complement(const Ranges& in) {
    Ranges out;
    uint32_t next = 0;
    for (const auto& [lo, hi] : normalize(in)) {
        if (lo > next) out.emplace_back(next, lo - 1);
        next = hi + 1;
    }
    if (next <= kMax) out.emplace_back(next, kMax);
    return out;
}

// One code point as GBNF writes it inside a literal or a class.
std::string gbnf_char(uint32_t c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ' ')
        return std::string(1, static_cast<char>(c));
    char buf[16];
    if (c < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02X", c);
    else if (c < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04X", c);
    else
        std::snprintf(buf, sizeof buf, "\\U%08X", c);
    return buf;
}

std::string gbnf_literal(const std::vector<uint32_t>& cps) {
    std::string s = "\"";
    for (uint32_t c : cps) s += gbnf_char(c);
    return s + "\"";
}

class Parser {
public:
    Parser(std::string_view re, bool json) : json_(json) {
        for (size_t i = 0; i < re.size();) {  // UTF-8 to code points
            const auto b = static_cast<unsigned char>(re[i]);
            const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
            uint32_t c = len == 1 ? b : b & (0x7F >> len);
            for (int k = 1; k < len && i + k < re.size(); ++k)
                c = c << 6 | (static_cast<unsigned char>(re[i + k]) & 0x3F);
            cps_.push_back(c);
            i += len;
        }
        if (!cps_.empty() && cps_.front() == '^') cps_.erase(cps_.begin());
        if (!cps_.empty() && cps_.back() == '$' &&
            (cps_.size() < 2 || cps_[cps_.size() - 2] != '\\'))
            cps_.pop_back();
    }

    std::string parse() {
        const std::string e = alternation();
        if (pos_ < cps_.size()) error("unbalanced ')'");
        return e.empty() ? "\"\"" : e;
    }

private:
    [[noreturn]] void error(const std::string& what) const {
        fail("regex: at position ", pos_, ": ", what);
    }
    bool more() const { return pos_ < cps_.size(); }
    uint32_t peek() const { return cps_[pos_]; }

    std::string alternation() {
        std::vector<std::string> alts{sequence()};
        while (more() && peek() == '|') {
            ++pos_;
            alts.push_back(sequence());
        }
        if (alts.size() == 1) return alts[0];
        std::string out = "(";
        for (size_t i = 0; i < alts.size(); ++i)
            out += (i ? " | " : "") + (alts[i].empty() ? std::string("\"\"") : alts[i]);
        return out + ")";
    }

    std::string sequence() {
        std::string out;
        while (more() && peek() != '|' && peek() != ')') {
            std::string a = atom();
            a += quantifiers();
            out += (out.empty() ? "" : " ") + a;
        }
        return out;
    }

    int number() {
        int v = 0;
        const size_t start = pos_;
        while (more() && peek() >= '0' && peek() <= '9' && v < 100000)
            v = v * 10 + (cps_[pos_++] - '0');
        if (pos_ == start) error("expected a number in {m,n}");
        return v;
    }

    // At most one quantifier (a lazy one matches the same strings), in GBNF's form.
    std::string quantifiers() {
        if (!more()) return "";
        std::string q;
        const uint32_t c = peek();
        if (c == '*' || c == '+' || c == '?') {
            ++pos_;
            q = std::string(1, static_cast<char>(c));
        } else if (c == '{') {
            ++pos_;
            const int m = number();
            int n = m;
            if (more() && peek() == ',') {
                ++pos_;
                n = more() && peek() == '}' ? -1 : number();
            }
            if (!more() || peek() != '}') error("expected '}'");
            ++pos_;
            if (n >= 0 && n < m) error("{m,n} with n < m");
            q = "{" + std::to_string(m) + (n == m ? "" : ",") + (n > m ? std::to_string(n) : "") +
                "}";
        } else {
            return "";
        }
        if (more() && peek() == '?') ++pos_;
        if (more() && (peek() == '+' || peek() == '*' || peek() == '?' || peek() == '{'))
            error("a quantifier after a quantifier");
        return q;
    }

    std::string atom() {
        const uint32_t c = cps_[pos_++];
        if (c == '(') {
            if (more() && peek() == '?') {
                if (pos_ + 1 < cps_.size() && cps_[pos_ + 1] == ':')
                    pos_ += 2;
                else
                    error("look-around and named groups are not supported");
            }
            const std::string inner = alternation();
            if (!more() || peek() != ')') error("expected ')'");
            ++pos_;
            return "(" + (inner.empty() ? std::string("\"\"") : inner) + ")";
        }
        if (c == '[') return set(class_ranges());
        if (c == '.') return set(complement({{'\n', '\n'}}));
        if (c == '\\') {
            Ranges r;
            if (escape(r, false)) return set(r);
            return single(r[0].first);
        }
        if (c == '^' || c == '$') error("anchors inside the pattern are not supported");
        if (c == '*' || c == '+' || c == '?' || c == '{') error("nothing to repeat");
        return single(c);
    }

    // An escape after '\': a class (\d \w \s and negations: true, ranges in r) or one
    // character (false, r = {c, c}).
    bool escape(Ranges& r, bool in_class) {
        if (!more()) error("a trailing backslash");
        const uint32_t e = cps_[pos_++];
        const Ranges digit{{'0', '9'}}, word{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
            space{{'\t', '\r'}, {' ', ' '}};
        switch (e) {
            case 'd':
                r = digit;
                return true;
            case 'D':
                r = complement(digit);
                return true;
            case 'w':
                r = word;
                return true;
            case 'W':
                r = complement(word);
                return true;
            case 's':
                r = space;
                return true;
            case 'S':
                r = complement(space);
                return true;
            case 'n':
                r = {{'\n', '\n'}};
                return false;
            case 'r':
                r = {{'\r', '\r'}};
                return false;
            case 't':
                r = {{'\t', '\t'}};
                return false;
            case 'f':
                r = {{'\f', '\f'}};
                return false;
            case 'v':
                r = {{'\v', '\v'}};
                return false;
            case 'x':
            case 'u': {
                const int digits = e == 'x' ? 2 : 4;
                uint32_t v = 0;
                for (int i = 0; i < digits; ++i) {
                    if (!more()) error("a short hexadecimal escape");
                    const uint32_t h = cps_[pos_++];
                    const int d = h >= '0' && h <= '9'   ? int(h - '0')
                                  : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
                                  : h >= 'A' && h <= 'F' ? int(h - 'A' + 10)
                                                         : -1;
                    if (d < 0) error("expected a hexadecimal digit");
                    v = v << 4 | static_cast<uint32_t>(d);
                }
                r = {{v, v}};
                return false;
            }
            default:
                if ((e >= '0' && e <= '9') || (!in_class && (e == 'b' || e == 'B')) || e == 'A' ||
                    e == 'z' || e == 'Z' || e == 'k' || e == 'p' || e == 'P')
                    error(std::string("\\") + static_cast<char>(e) + " is not supported");
                r = {{e, e}};  // an escaped punctuation character is itself
                return false;
        }
    }

    Ranges class_ranges() {
        bool negated = false;
        if (more() && peek() == '^') {
            negated = true;
            ++pos_;
        }
        Ranges r;
        bool first = true;
        while (more() && (peek() != ']' || first)) {
            first = false;
            uint32_t lo = cps_[pos_++];
            if (lo == '\\') {
                Ranges e;
                if (escape(e, true)) {
                    r.insert(r.end(), e.begin(), e.end());
                    continue;
                }
                lo = e[0].first;
            }
            uint32_t hi = lo;
            if (pos_ + 1 < cps_.size() && peek() == '-' && cps_[pos_ + 1] != ']') {
                ++pos_;
                hi = cps_[pos_++];
                if (hi == '\\') {
                    Ranges e;
                    if (escape(e, true)) error("a class escape cannot end a range");
                    hi = e[0].first;
                }
                if (hi < lo) error("a reversed range in a class");
            }
            r.emplace_back(lo, hi);
        }
        if (!more()) error("expected ']'");
        ++pos_;
        return negated ? complement(r) : normalize(r);
    }

    std::string single(uint32_t c) { return set({{c, c}}); }

    // A set of code points as a GBNF expression: a class (or literal), and in a JSON string
    // body the escaped forms of the characters JSON does not allow as they are.
    std::string set(const Ranges& in) {
        Ranges plain;
        std::vector<std::string> escaped;
        for (const auto& [lo, hi] : normalize(in)) {
            uint32_t a = lo;
            if (json_) {
                for (; a <= hi && a < 0x20; ++a) {  // control characters: \u00XX
                    char buf[16];
                    std::snprintf(buf, sizeof buf, "\\\\u%04X", a);
                    escaped.push_back(std::string("\"") + buf + "\"");
                }
                if (a > hi) continue;
                for (uint32_t special : {uint32_t{'"'}, uint32_t{'\\'}}) {
                    if (special < a || special > hi) continue;
                    if (special > a) plain.emplace_back(a, special - 1);
                    escaped.push_back(special == '"' ? "\"\\\\\\\"\"" : "\"\\\\\\\\\"");
                    a = special + 1;
                }
                if (a > hi) continue;
            }
            plain.emplace_back(a, hi);
        }
        std::vector<std::string> alts;
        if (plain.size() == 1 && plain[0].first == plain[0].second) {
            alts.push_back(gbnf_literal({plain[0].first}));
        } else if (!plain.empty()) {
            std::string cls = "[";
            for (const auto& [lo, hi] : plain)
                cls += lo == hi ? gbnf_char(lo) : gbnf_char(lo) + "-" + gbnf_char(hi);
            alts.push_back(cls + "]");
        }
        alts.insert(alts.end(), escaped.begin(), escaped.end());
        if (alts.empty()) error("a class that matches nothing");
        if (alts.size() == 1) return alts[0];
        std::string out = "(";
        for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
        return out + ")";
    }

    std::vector<uint32_t> cps_;
    size_t pos_ = 0;
    bool json_;
};

}  // namespace

std::string regex_to_gbnf(std::string_view regex, bool json_string) {
    return Parser(regex, json_string).parse();
}

}  // namespace syslm::grammar
