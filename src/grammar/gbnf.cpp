#include "grammar/gbnf.hpp"

#include <cstdio>
#include <string>

#include "core/error.hpp"

namespace syslm::grammar {
namespace {

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

class Parser {
public:
    explicit Parser(std::string_view s) : s_(s) {}

    Grammar parse(const std::string& root) {
        space(true);
        while (pos_ < s_.size()) {
            const std::string name = name_here();
            space(false);
            expect("::=");
            space(true);
            const uint32_t r = b_.rule(name);
            if (b_.defined(r)) error("rule '" + name + "' is defined twice");
            b_.define(r, alternatives(name, false));
            space(false);
            if (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r')
                error("expected the end of the line after rule '" + name + "'");
            space(true);
        }
        return b_.finish(root);
    }

private:
    [[noreturn]] void error(const std::string& what) const {
        int line = 1, col = 1;
        for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
            if (s_[i] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        fail("grammar: line ", line, ", column ", col, ": ", what);
    }

    // Spaces, tabs and comments; newlines too when `newlines`.
    void space(bool newlines) {
        while (pos_ < s_.size()) {
            const char c = s_[pos_];
            if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
                ++pos_;
            } else if (c == '#') {
                while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
            } else {
                break;
            }
        }
    }

    void expect(std::string_view token) {
        if (s_.substr(pos_, token.size()) != token) error("expected '" + std::string(token) + "'");
        pos_ += token.size();
    }

    std::string name_here() {
        const size_t start = pos_;
        while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
        if (pos_ == start) error("expected a rule name");
        return std::string(s_.substr(start, pos_ - start));
    }

    std::vector<std::vector<Element>> alternatives(const std::string& rule, bool nested) {
        std::vector<std::vector<Element>> alts;
        alts.push_back(sequence(rule, nested));
        while (pos_ < s_.size() && s_[pos_] == '|') {
            ++pos_;
            space(true);
            alts.push_back(sequence(rule, nested));
        }
        return alts;
    }

    // One UTF-8 character or escape of a literal or class, as a code point.
    uint32_t character() {
        if (pos_ >= s_.size()) error("unexpected end of the grammar");
        const auto c = static_cast<unsigned char>(s_[pos_]);
        if (c == '\\') {
            if (++pos_ >= s_.size()) error("unfinished escape");
            const char e = s_[pos_++];
            switch (e) {
                case 'n':
                    return '\n';
                case 'r':
                    return '\r';
                case 't':
                    return '\t';
                case '\\':
                case '"':
                case '[':
                case ']':
                case '-':
                case '^':
                    return static_cast<uint32_t>(e);
                case 'x':
                    return hex(2);
                case 'u':
                    return hex(4);
                case 'U':
                    return hex(8);
                default:
                    --pos_;
                    error(std::string("unknown escape '\\") + e + "'");
            }
        }
        const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if ((c & 0xC0) == 0x80 || c > 0xF7 || pos_ + len > s_.size()) error("invalid UTF-8");
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (int i = 1; i < len; ++i) {
            const auto d = static_cast<unsigned char>(s_[pos_ + i]);
            if ((d & 0xC0) != 0x80) error("invalid UTF-8");
            cp = cp << 6 | (d & 0x3F);
        }
        pos_ += len;
        return cp;
    }

    uint32_t hex(int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i, ++pos_) {
            if (pos_ >= s_.size()) error("unfinished hexadecimal escape");
            const char h = s_[pos_];
            const int d = h >= '0' && h <= '9'   ? h - '0'
                          : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                 : -1;
            if (d < 0) error("expected a hexadecimal digit");
            v = v << 4 | static_cast<uint32_t>(d);
        }
        if (v > 0x10FFFF) error("code point beyond U+10FFFF");
        return v;
    }

    int number() {
        const size_t start = pos_;
        long v = 0;
        while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
            v = v * 10 + (s_[pos_++] - '0');
            if (v > 100000) error("repetition count too large");
        }
        if (pos_ == start) error("expected a number");
        return static_cast<int>(v);
    }

    // One atom (literal, class, any, rule name, group), as the elements it stands for.
    std::vector<Element> atom(const std::string& rule) {
        const char c = s_[pos_];
        std::vector<Element> out;
        if (c == '"') {
            ++pos_;
            while (pos_ < s_.size() && s_[pos_] != '"') {
                const uint32_t cp = character();
                out.push_back(b_.chars({{cp, cp}}));
            }
            expect("\"");
        } else if (c == '[') {
            ++pos_;
            const bool negated = pos_ < s_.size() && s_[pos_] == '^';
            if (negated) ++pos_;
            std::vector<std::pair<uint32_t, uint32_t>> ranges;
            while (pos_ < s_.size() && s_[pos_] != ']') {
                const uint32_t lo = character();
                uint32_t hi = lo;
                if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
                    ++pos_;
                    hi = character();
                    if (hi < lo) error("reversed character range");
                }
                ranges.emplace_back(lo, hi);
            }
            expect("]");
            out.push_back(b_.chars(ranges, negated));
        } else if (c == '.') {
            ++pos_;
            out.push_back(b_.chars({{0, 0x10FFFF}}));
        } else if (c == '(') {
            ++pos_;
            space(true);
            const uint32_t group = b_.fresh_rule(rule);
            b_.define(group, alternatives(rule, true));
            expect(")");
            out.push_back(GrammarBuilder::ref(group));
        } else if (is_name_char(c)) {
            out.push_back(GrammarBuilder::ref(b_.rule(name_here())));
        } else {
            error(std::string("unexpected '") + c + "'");
        }
        return out;
    }

    std::vector<Element> sequence(const std::string& rule, bool nested) {
        std::vector<Element> seq;
        while (pos_ < s_.size()) {
            const char c = s_[pos_];
            if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
            std::vector<Element> item = atom(rule);
            space(nested);
            while (pos_ < s_.size() &&
                   (s_[pos_] == '*' || s_[pos_] == '+' || s_[pos_] == '?' || s_[pos_] == '{')) {
                int min = 0, max = -1;
                const char op = s_[pos_++];
                if (op == '+') {
                    min = 1;
                } else if (op == '?') {
                    max = 1;
                } else if (op == '{') {
                    space(false);
                    min = number();
                    space(false);
                    max = min;
                    if (pos_ < s_.size() && s_[pos_] == ',') {
                        ++pos_;
                        space(false);
                        max = pos_ < s_.size() && s_[pos_] == '}' ? -1 : number();
                        space(false);
                    }
                    expect("}");
                    if (max >= 0 && max < min) error("repetition {m,n} with n < m");
                }
                item = repeat(b_, rule, item, min, max);
                space(nested);
            }
            seq.insert(seq.end(), item.begin(), item.end());
        }
        if (!nested && pos_ < s_.size() && s_[pos_] == ')') error("unbalanced ')'");
        return seq;
    }

    std::string_view s_;
    size_t pos_ = 0;
    GrammarBuilder b_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, const std::string& root) {
    return Parser(text).parse(root);
}

std::string gbnf_literal(std::string_view text) {
    std::string out = "\"";
    for (unsigned char c : text) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

std::string prefix_rule_names(std::string_view text, std::string_view prefix) {
    std::string out;
    size_t i = 0;
    // Copies text[i] up to and including `close`, past backslash escapes.
    const auto copy_until = [&](char close) {
        out += text[i++];
        while (i < text.size() && text[i] != close) {
            if (text[i] == '\\' && i + 1 < text.size()) out += text[i++];
            out += text[i++];
        }
        if (i < text.size()) out += text[i++];
    };
    while (i < text.size()) {
        const char c = text[i];
        if (c == '"') {
            copy_until('"');
        } else if (c == '[') {
            copy_until(']');
        } else if (c == '{') {
            copy_until('}');
        } else if (c == '#') {
            copy_until('\n');
        } else if (is_name_char(c)) {
            out += prefix;
            while (i < text.size() && is_name_char(text[i])) out += text[i++];
        } else {
            out += text[i++];
        }
    }
    return out;
}

}  // namespace syslm::grammar
