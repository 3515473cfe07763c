// Substring dedup's parts against brute force: the suffix array against sorting every suffix,
// the LCP array against direct comparison (random sequences over small alphabets, so suffixes
// share long prefixes), and the words SubstringDedup cuts against a direct search for m-word
// spans that occurred earlier; then `data clean --dedup substring` end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "curate/clean.hpp"
#include "curate/substring_dedup.hpp"
#include "curate/suffix_array.hpp"

namespace syslm::curate {
namespace {

TEST(SuffixArray, MatchesSortedSuffixesAndDirectLcp) {
    std::mt19937 rng(2);
    for (int n : {0, 1, 2, 7, 100, 1000})
        for (int alphabet : {1, 2, 3, 50}) {
            std::vector<int32_t> s(static_cast<size_t>(n));
            for (int32_t& x : s) x = static_cast<int32_t>(rng() % alphabet);
            std::vector<int32_t> want(s.size());
            for (int i = 0; i < n; ++i) want[static_cast<size_t>(i)] = i;
            std::sort(want.begin(), want.end(), [&](int32_t a, int32_t b) {
                return std::lexicographical_compare(s.begin() + a, s.end(), s.begin() + b, s.end());
            });
            const auto sa = suffix_array(s, alphabet);
            ASSERT_EQ(sa, want) << "n " << n << " alphabet " << alphabet;
            const auto lcp = lcp_array(s, sa);
            for (size_t k = 1; k < sa.size(); ++k) {
                int32_t h = 0;
                while (sa[k] + h < n && sa[k - 1] + h < n && s[sa[k] + h] == s[sa[k - 1] + h]) ++h;
                ASSERT_EQ(lcp[k], h) << k;
            }
        }
}

// Each word: cut iff it lies in an m-word span (inside its document) that occurred earlier.
std::vector<std::vector<bool>> brute_force(const std::vector<std::vector<std::string>>& docs,
                                           size_t m) {
    std::map<std::vector<std::string>, std::pair<size_t, size_t>> first;  // span -> (doc, word)
    std::vector<std::vector<bool>> cut;
    for (size_t d = 0; d < docs.size(); ++d) {
        cut.emplace_back(docs[d].size(), false);
        for (size_t p = 0; p + m <= docs[d].size(); ++p) {
            std::vector<std::string> span(docs[d].begin() + p, docs[d].begin() + p + m);
            const auto [it, added] = first.emplace(span, std::pair{d, p});
            if (!added)
                for (size_t i = p; i < p + m; ++i) cut[d][i] = true;
        }
    }
    return cut;
}

TEST(SubstringDedup, CutsExactlyTheSpansSeenEarlier) {
    std::mt19937 rng(7);
    for (size_t m : {1u, 3u, 5u}) {
        std::vector<std::vector<std::string>> docs;
        for (int d = 0; d < 40; ++d) {
            std::vector<std::string> w;
            const int n = static_cast<int>(rng() % 30);
            for (int i = 0; i < n; ++i) {
                if (!docs.empty() && rng() % 10 == 0) {  // paste a run from an earlier document
                    const auto& src = docs[rng() % docs.size()];
                    if (!src.empty()) {
                        const size_t at = rng() % src.size(), len = 1 + rng() % 8;
                        for (size_t j = at; j < std::min(src.size(), at + len); ++j)
                            w.push_back(src[j]);
                    }
                }
                w.push_back(std::string("w").append(std::to_string(rng() % 6)));
            }
            docs.push_back(w);
        }
        SubstringDedup dedup(static_cast<int>(m));
        std::vector<std::string> texts;
        for (size_t d = 0; d < docs.size(); ++d) {
            std::string t = "  ";
            for (const auto& w : docs[d]) t.append(w).append(d % 2 ? "\n" : "  ");
            texts.push_back(t);
            dedup.add(static_cast<int64_t>(d), t);
        }
        dedup.run();
        const auto cut = brute_force(docs, m);
        int64_t total = 0;
        for (size_t d = 0; d < docs.size(); ++d) {
            std::vector<std::string> kept;
            for (size_t i = 0; i < docs[d].size(); ++i)
                if (!cut[d][i]) kept.push_back(docs[d][i]);
            total += static_cast<int64_t>(docs[d].size() - kept.size());
            std::istringstream got(dedup.apply(static_cast<int64_t>(d), texts[d]));
            std::vector<std::string> words;
            for (std::string w; got >> w;) words.push_back(w);
            ASSERT_EQ(words, kept) << "m " << m << " document " << d;
        }
        EXPECT_EQ(dedup.removed_words(), total);
        EXPECT_GT(total, 0);
    }
}

TEST(SubstringDedup, CleanCutsRepeatedSpansFromLaterDocuments) {
    namespace fs = std::filesystem;
    const fs::path d = fs::path(SYSLM_TEST_TMP) / "curate_substring";
    fs::remove_all(d);
    fs::create_directories(d);
    const std::string boiler = "subscribe to our newsletter for the latest news and offers today";
    std::ofstream(d / "in.txt") << "in the beginning god created the heaven and the earth. "
                                << boiler << "\n\nand the earth was without form. " << boiler
                                << "\n\n"
                                << boiler << "\n";
    CleanOptions o;
    o.inputs = {(d / "in.txt").string()};
    o.out_dir = (d / "out").string();
    o.exact = o.near = false;
    o.substring_words = 5;
    const CleanReport r = clean(o);
    std::ifstream in(d / "out" / "in.txt");
    std::stringstream got;
    got << in.rdbuf();
    std::string want = "in the beginning god created the heaven and the earth. ";
    want.append(boiler).append("\n\nand the earth was without form.\n\n");
    EXPECT_EQ(got.str(), want);
    EXPECT_EQ(r.substring_words, 22);  // the boilerplate's 11 words, twice
    EXPECT_EQ(r.emptied, 1);
    EXPECT_EQ(r.kept, 2);
}

}  // namespace
}  // namespace syslm::curate
