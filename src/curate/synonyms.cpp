#include "curate/synonyms.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <random>
#include <string>

namespace syslm::curate {

namespace {

// English function words (pronouns, determiners, auxiliaries, prepositions, conjunctions):
// WordNet lists some of them ("be" -> "exist", "have" -> "own") with senses they seldom carry.
constexpr std::array kFunctionWords = {
    "about",      "above",   "after",   "again", "against",  "all",       "also",    "and",
    "any",        "are",     "because", "been",  "before",   "being",     "below",   "between",
    "both",       "but",     "can",     "could", "did",      "does",      "doing",   "down",
    "during",     "each",    "even",    "few",   "for",      "from",      "further", "had",
    "has",        "have",    "having",  "her",   "here",     "hers",      "herself", "him",
    "himself",    "his",     "how",     "into",  "its",      "itself",    "just",    "may",
    "might",      "more",    "most",    "much",  "must",     "nor",       "not",     "now",
    "off",        "once",    "one",     "only",  "other",    "our",       "ours",    "ourselves",
    "out",        "over",    "own",     "same",  "shall",    "she",       "should",  "some",
    "such",       "than",    "that",    "the",   "thee",     "their",     "theirs",  "them",
    "themselves", "then",    "there",   "these", "they",     "thine",     "this",    "those",
    "thou",       "through", "thus",    "thy",   "too",      "under",     "unto",    "until",
    "upon",       "very",    "was",     "were",  "what",     "when",      "where",   "which",
    "while",      "who",     "whom",    "why",   "will",     "with",      "would",   "yea",
    "yet",        "you",     "your",    "yours", "yourself", "yourselves"};

bool is_function_word(const std::string& w) {
    return std::find_if(kFunctionWords.begin(), kFunctionWords.end(),
                        [&](const char* f) { return w == f; }) != kFunctionWords.end();
}

bool is_letter(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A neighbour that makes the letters part of something else: a number, a contraction, a
// hyphenated compound, a word in another script.
bool joins(char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '\'' || c == '-' ||
           static_cast<unsigned char>(c) >= 0x80;
}

std::string with_case_of(std::string_view word, std::string syn) {
    const bool all_upper = word.size() > 1 && std::all_of(word.begin(), word.end(), [](char c) {
                               return std::isupper(static_cast<unsigned char>(c));
                           });
    if (all_upper)
        for (char& c : syn) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    else if (std::isupper(static_cast<unsigned char>(word[0])))
        syn[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(syn[0])));
    return syn;
}

// The synonyms `word` (as written) may take; empty when it is not eligible.
std::vector<std::string_view> candidates(const WordNet& wordnet, std::string_view word) {
    if (word.size() < 3) return {};
    std::string lower(word);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const WordNet::Synset* synset = is_function_word(lower) ? nullptr : wordnet.synonyms(lower);
    // A word in lower case keeps to common nouns: not "waters" -> "Ethel Waters".
    const bool common = std::islower(static_cast<unsigned char>(word[0]));
    if (!synset || (common && std::isupper(static_cast<unsigned char>(synset->spelled[0]))))
        return {};
    std::vector<std::string_view> syn;
    for (const std::string& s : synset->others)
        if (s.size() >= 3 && (!common || !std::isupper(static_cast<unsigned char>(s[0]))))
            syn.push_back(s);  // not abbreviations ("second" -> "s")
    return syn;
}

}  // namespace

std::vector<Edit> SynonymReplacer::edits(std::string_view text, uint64_t seed,
                                         int64_t& eligible) const {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<Edit> out;
    for (size_t i = 0; i < text.size();) {
        if (!is_letter(text[i])) {
            ++i;
            continue;
        }
        size_t e = i;
        while (e < text.size() && is_letter(text[e])) ++e;
        const std::string_view word = text.substr(i, e - i);
        const bool isolated =
            (i == 0 || !joins(text[i - 1])) && (e == text.size() || !joins(text[e]));
        const size_t at = i;
        i = e;
        const std::vector<std::string_view> syn =
            isolated ? candidates(wordnet_, word) : std::vector<std::string_view>{};
        if (syn.empty()) continue;
        ++eligible;
        if (u(rng) >= rate_) continue;
        const std::string_view pick =
            syn[std::uniform_int_distribution<size_t>(0, syn.size() - 1)(rng)];
        out.push_back({at, std::string(word), with_case_of(word, std::string(pick))});
    }
    return out;
}

}  // namespace syslm::curate
