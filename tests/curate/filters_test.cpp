// The heuristic quality rules (curate/filters.hpp): a KJV-like chapter passes Gopher's
// defaults; each crafted document fails exactly the rule it was made to break; a TOML file
// changes thresholds, and a misspelt key is an error naming it.
#include "curate/filters.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"

namespace syslm::curate {
namespace {

// 60 words of ordinary prose, no repeated 5-grams.
std::string prose() {
    return "In the beginning God created the heaven and the earth. And the earth was without "
           "form, and void; and darkness was upon the face of the deep. And the Spirit of God "
           "moved upon the face of the waters. And God said, Let there be light: and there was "
           "light. And God saw the light, that it was good: and God divided the light from the "
           "darkness. And God called the light Day, and the darkness he called Night.";
}

TEST(Filters, EachRuleCatchesWhatItIsFor) {
    const HeuristicFilters f;
    EXPECT_EQ(f.reject(prose()), std::nullopt);
    EXPECT_EQ(f.reject("too short to be a document"), "min_words");
    std::string long_words;  // 60 words of 14 letters
    for (int i = 0; i < 60; ++i) long_words.append("extraordinaires ");
    EXPECT_EQ(f.reject(long_words), "max_mean_word_length");
    std::string tags = prose();
    for (int i = 0; i < 12; ++i) tags.append(" #tag");
    EXPECT_EQ(f.reject(tags), "max_symbol_word_ratio");
    EXPECT_EQ(f.reject(prose() + " 1234567890123456789012345678901234567890 "
                                 "1234567890123456789012345678901234567890 "
                                 "12345678901234567890123456789012345678901234567890123"),
              "max_digit_ratio");
    std::string no_stops;  // ordinary words, none of the eight stop words
    for (int i = 0; i < 12; ++i)
        no_stops.append("quick brown foxes jump over lazy dogs near rivers ");
    EXPECT_EQ(f.reject(no_stops), "min_stop_words");
    std::string bullets;
    for (const char* w : {"apples", "pears", "plums", "figs", "dates", "limes", "kiwis", "grapes",
                          "melons", "cherries", "lemons", "berries"})
        bullets.append("- the item and the rest of the ").append(w).append("\n");
    EXPECT_EQ(f.reject(bullets), "max_bullet_lines");
    std::string repeated = prose() + "\n";
    for (int i = 0; i < 4; ++i) repeated += "click here to subscribe and share with the world\n";
    EXPECT_EQ(f.reject(repeated), "max_duplicate_lines");
    EXPECT_EQ(f.reject(prose() + " lorem IPSUM dolor"), "bad_substrings");
}

TEST(Filters, TomlChangesThresholdsAndRefusesUnknownKeys) {
    namespace fs = std::filesystem;
    const fs::path d = fs::path(SYSLM_TEST_TMP) / "curate_filters";
    fs::create_directories(d);
    std::ofstream(d / "f.toml") << "min_words = 3\nmin_stop_words = 0\n"
                                   "bad_substrings = [\"subscribe\"]\n"
                                   "max_top_ngram_chars = [0.5, 0.5, 0.5]\n";
    const HeuristicFilters f = HeuristicFilters::from_toml((d / "f.toml").string());
    EXPECT_EQ(f.min_words, 3);
    EXPECT_EQ(f.max_top_ngram_chars, (std::vector<double>{0.5, 0.5, 0.5}));
    EXPECT_EQ(f.reject("a short line here"), std::nullopt);
    EXPECT_EQ(f.reject("please subscribe now"), "bad_substrings");
    EXPECT_EQ(f.reject(prose() + " lorem ipsum"), std::nullopt);  // the list was replaced
    std::ofstream(d / "bad.toml") << "min_word = 3\n";
    try {
        HeuristicFilters::from_toml((d / "bad.toml").string());
        FAIL() << "a misspelt key was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'min_word' is not a filter setting"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace syslm::curate
