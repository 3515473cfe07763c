// Document quality rules in the style of Gopher (Rae et al. 2021, appendix A: length, mean word
// length, symbol, alphabetic-word and stop-word rules, bullet and ellipsis lines, repeated lines
// and n-grams) and C4 (Raffel et al. 2020: pages with "lorem ipsum" or a curly bracket), plus a
// digit ratio. The defaults are the papers' thresholds; a TOML file (keys as the fields below)
// changes any of them, and a key that names no rule is an error.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace syslm::curate {

struct HeuristicFilters {
    int min_words = 50, max_words = 100000;
    double min_mean_word_length = 3, max_mean_word_length = 10;
    double max_symbol_word_ratio = 0.1;  // "#" and "..." per word
    double max_digit_ratio = 0.2;        // digits per non-space character
    double min_alpha_word_ratio = 0.8;   // words with a letter
    int min_stop_words = 2;              // of the, be, to, of, and, that, have, with
    double max_bullet_lines = 0.9, max_ellipsis_lines = 0.3;
    double max_duplicate_lines = 0.3, max_duplicate_line_chars = 0.2;
    // the most frequent 2-, 3-, 4-gram's characters over the words' characters
    std::vector<double> max_top_ngram_chars = {0.20, 0.18, 0.16};
    // characters in 5- .. 10-grams that occur more than once, over the words' characters
    std::vector<double> max_duplicate_ngram_chars = {0.15, 0.14, 0.13, 0.12, 0.11, 0.10};
    std::vector<std::string> bad_substrings = {"lorem ipsum", "{"};  // case-folded

    static HeuristicFilters from_toml(const std::string& path);
    // The first rule the document fails ("min_words", ...), or nothing when it passes.
    std::optional<std::string> reject(std::string_view text) const;
};

}  // namespace syslm::curate
