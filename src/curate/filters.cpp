#include "curate/filters.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <unordered_map>

#include "core/error.hpp"
#include "curate/normalize.hpp"

namespace syslm::curate {

namespace {

std::vector<std::string_view> words_of(std::string_view t) {
    std::vector<std::string_view> w;
    for (const auto& [b, e] : word_spans(t)) w.push_back(t.substr(b, e - b));
    return w;
}

std::vector<std::string_view> lines_of(std::string_view t) {
    std::vector<std::string_view> out;
    size_t b = 0;
    while (b <= t.size()) {
        size_t e = t.find('\n', b);
        if (e == std::string_view::npos) e = t.size();
        std::string_view l = t.substr(b, e - b);
        while (!l.empty() && is_space(l.back())) l.remove_suffix(1);
        while (!l.empty() && is_space(l.front())) l.remove_prefix(1);
        if (!l.empty()) out.push_back(l);
        b = e + 1;
    }
    return out;
}

std::string lower(std::string_view s) {
    std::string o(s);
    for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return o;
}

// Gopher's repetition measures over the words (case-folded, as the paper's).
struct Repetition {
    std::vector<std::string> w;
    double chars = 0;  // characters of all words
    explicit Repetition(const std::vector<std::string_view>& words) {
        for (auto x : words) {
            w.push_back(lower(x));
            chars += static_cast<double>(x.size());
        }
    }
    std::string gram(size_t i, size_t n) const {
        std::string g;
        for (size_t k = i; k < i + n; ++k) g.append(w[k]).push_back(' ');
        return g;
    }
    double gram_chars(size_t i, size_t n) const {
        double c = 0;
        for (size_t k = i; k < i + n; ++k) c += static_cast<double>(w[k].size());
        return c;
    }
    // the most frequent n-gram's characters times its count, over all characters
    double top(size_t n) const {
        if (w.size() < n) return 0;
        std::unordered_map<std::string, std::pair<int, double>> count;
        for (size_t i = 0; i + n <= w.size(); ++i) {
            auto& c = count[gram(i, n)];
            ++c.first;
            c.second = gram_chars(i, n);
        }
        double best = 0;
        int best_count = 0;
        for (const auto& [g, c] : count)
            if (c.first > best_count) {
                best_count = c.first;
                best = c.second * c.first;
            }
        return best_count > 1 ? best / chars : 0;
    }
    // characters of the words inside n-grams that occur more than once, over all characters
    double duplicated(size_t n) const {
        if (w.size() < n) return 0;
        std::unordered_map<std::string, int> count;
        for (size_t i = 0; i + n <= w.size(); ++i) ++count[gram(i, n)];
        std::vector<bool> in(w.size(), false);
        for (size_t i = 0; i + n <= w.size(); ++i)
            if (count[gram(i, n)] > 1) std::fill_n(in.begin() + static_cast<int64_t>(i), n, true);
        double c = 0;
        for (size_t k = 0; k < w.size(); ++k)
            if (in[k]) c += static_cast<double>(w[k].size());
        return c / chars;
    }
};

}  // namespace

namespace {

// Gopher's word-level rules and the digit ratio.
std::optional<std::string> word_rules(const HeuristicFilters& f, std::string_view text,
                                      const std::vector<std::string_view>& words) {
    const auto n = static_cast<double>(words.size());
    if (static_cast<int>(words.size()) < f.min_words) return "min_words";
    if (static_cast<int>(words.size()) > f.max_words) return "max_words";
    double letters = 0, symbols = 0, alpha_words = 0, stops = 0;
    static const std::vector<std::string> kStop = {"the", "be",   "to",   "of",
                                                   "and", "that", "have", "with"};
    for (auto w : words) {
        letters += static_cast<double>(w.size());
        symbols += w.find('#') != std::string_view::npos;
        symbols += w.find("...") != std::string_view::npos ||
                   w.find("\xe2\x80\xa6") != std::string_view::npos;
        alpha_words += std::any_of(w.begin(), w.end(), [](char c) {
            return std::isalpha(static_cast<unsigned char>(c)) != 0;
        });
        stops += std::find(kStop.begin(), kStop.end(), lower(w)) != kStop.end();
    }
    if (n > 0 && letters / n < f.min_mean_word_length) return "min_mean_word_length";
    if (n > 0 && letters / n > f.max_mean_word_length) return "max_mean_word_length";
    if (n > 0 && symbols / n > f.max_symbol_word_ratio) return "max_symbol_word_ratio";
    const auto digits = static_cast<double>(std::count_if(text.begin(), text.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
    }));
    if (letters > 0 && digits / letters > f.max_digit_ratio) return "max_digit_ratio";
    if (n > 0 && alpha_words / n < f.min_alpha_word_ratio) return "min_alpha_word_ratio";
    if (stops < f.min_stop_words) return "min_stop_words";
    return std::nullopt;
}

// Gopher's line rules: bullets, ellipses, repeated lines.
std::optional<std::string> line_rules(const HeuristicFilters& f, std::string_view text) {
    const std::vector<std::string_view> lines = lines_of(text);
    if (lines.empty()) return std::nullopt;
    double bullets = 0, ellipsis = 0, dup_lines = 0, dup_chars = 0, chars = 0;
    std::map<std::string_view, int> seen;
    for (auto l : lines) {
        bullets += l.starts_with("*") || l.starts_with("-") || l.starts_with("\xe2\x80\xa2");
        ellipsis += l.ends_with("...") || l.ends_with("\xe2\x80\xa6");
        chars += static_cast<double>(l.size());
        if (seen[l]++ > 0) {
            ++dup_lines;
            dup_chars += static_cast<double>(l.size());
        }
    }
    const auto m = static_cast<double>(lines.size());
    if (bullets / m > f.max_bullet_lines) return "max_bullet_lines";
    if (ellipsis / m > f.max_ellipsis_lines) return "max_ellipsis_lines";
    if (dup_lines / m > f.max_duplicate_lines) return "max_duplicate_lines";
    if (dup_chars / chars > f.max_duplicate_line_chars) return "max_duplicate_line_chars";
    return std::nullopt;
}

}  // namespace

std::optional<std::string> HeuristicFilters::reject(std::string_view text) const {
    const std::vector<std::string_view> words = words_of(text);
    if (auto r = word_rules(*this, text, words)) return r;
    if (auto r = line_rules(*this, text)) return r;
    const Repetition rep(words);
    for (size_t i = 0; i < max_top_ngram_chars.size(); ++i)
        if (rep.top(i + 2) > max_top_ngram_chars[i]) return "max_top_ngram_chars";
    for (size_t i = 0; i < max_duplicate_ngram_chars.size(); ++i)
        if (rep.duplicated(i + 5) > max_duplicate_ngram_chars[i])
            return "max_duplicate_ngram_chars";
    const std::string folded = lower(text);
    for (const std::string& bad : bad_substrings)
        if (folded.find(lower(bad)) != std::string::npos) return "bad_substrings";
    return std::nullopt;
}

HeuristicFilters HeuristicFilters::from_toml(const std::string& path) {
    HeuristicFilters f;
    std::vector<CLI::ConfigItem> items;
    try {
        items = CLI::ConfigTOML().from_file(path);
    } catch (const std::exception& e) {
        fail(path, ": ", e.what());
    }
    const std::map<std::string, std::function<void(const std::vector<std::string>&)>> set = [&] {
        std::map<std::string, std::function<void(const std::vector<std::string>&)>> m;
        auto number = [&](const char* key, auto& field) {
            m[key] = [&field, key, &path](const std::vector<std::string>& v) {
                SYSLM_CHECK(v.size() == 1, path, ": ", key, " takes one number");
                try {
                    field = static_cast<std::remove_reference_t<decltype(field)>>(std::stod(v[0]));
                } catch (const std::exception&) {
                    fail(path, ": ", key, " = ", v[0], " is not a number");
                }
            };
        };
        number("min_words", f.min_words);
        number("max_words", f.max_words);
        number("min_mean_word_length", f.min_mean_word_length);
        number("max_mean_word_length", f.max_mean_word_length);
        number("max_symbol_word_ratio", f.max_symbol_word_ratio);
        number("max_digit_ratio", f.max_digit_ratio);
        number("min_alpha_word_ratio", f.min_alpha_word_ratio);
        number("min_stop_words", f.min_stop_words);
        number("max_bullet_lines", f.max_bullet_lines);
        number("max_ellipsis_lines", f.max_ellipsis_lines);
        number("max_duplicate_lines", f.max_duplicate_lines);
        number("max_duplicate_line_chars", f.max_duplicate_line_chars);
        auto numbers = [&](const char* key, std::vector<double>& field, size_t count) {
            m[key] = [&field, key, count, &path](const std::vector<std::string>& v) {
                SYSLM_CHECK(v.size() == count, path, ": ", key, " takes ", count, " numbers");
                field.clear();
                for (const std::string& x : v) try {
                        field.push_back(std::stod(x));
                    } catch (const std::exception&) {
                        fail(path, ": ", key, " holds ", x, ", which is not a number");
                    }
            };
        };
        numbers("max_top_ngram_chars", f.max_top_ngram_chars, 3);
        numbers("max_duplicate_ngram_chars", f.max_duplicate_ngram_chars, 6);
        m["bad_substrings"] = [&](const std::vector<std::string>& v) { f.bad_substrings = v; };
        return m;
    }();
    for (const CLI::ConfigItem& item : items) {
        const std::string key = item.fullname();
        const auto it = set.find(key);
        SYSLM_CHECK(it != set.end(), path, ": '", key, "' is not a filter setting");
        it->second(item.inputs);
    }
    return f;
}

}  // namespace syslm::curate
