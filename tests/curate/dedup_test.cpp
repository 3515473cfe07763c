// Curation's dedup steps: documents split as `data prepare` splits them; normalization; exact
// dedup against a brute-force comparison of normalized texts; MinHash's Jaccard estimate
// against the exact Jaccard similarity of shingle sets (within 5 standard deviations of the
// estimator, sqrt(s (1 - s) / perm)); near-duplicate clusters of planted copies; and `clean`'s
// output independent of the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "curate/clean.hpp"
#include "curate/documents.hpp"
#include "curate/minhash.hpp"
#include "curate/normalize.hpp"

namespace syslm::curate {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
    const fs::path d = fs::path(SYSLM_TEST_TMP) / ("curate_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

void write(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
}

std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::vector<std::string> docs_of(const fs::path& f, DocUnit unit) {
    DocumentReader r({f.string()}, unit);
    std::vector<std::string> out;
    Document d;
    while (r.next(d)) out.push_back(d.text);
    return out;
}

TEST(Documents, BlocksLinesAndFiles) {
    const fs::path d = temp_dir("docs");
    write(d / "a.txt", "\n\none\ntwo\n\n\n three \r\n\nlast");
    EXPECT_EQ(docs_of(d / "a.txt", DocUnit::Blank),
              (std::vector<std::string>{"one\ntwo", " three ", "last"}));
    EXPECT_EQ(docs_of(d / "a.txt", DocUnit::Line),
              (std::vector<std::string>{"one", "two", " three ", "last"}));
    EXPECT_EQ(docs_of(d / "a.txt", DocUnit::File).size(), 1u);
    write(d / "b.txt", "");
    EXPECT_TRUE(docs_of(d / "b.txt", DocUnit::Blank).empty());
    EXPECT_EQ(input_files({d.string()}).size(), 2u);  // the directory's files, sorted
}

TEST(Normalize, FoldsCaseAndDropsPunctuationAndDigits) {
    EXPECT_EQ(normalize_text("  In the Beginning, God (1:1) created...\n the\theaven!  "),
              "in the beginning god created the heaven");
    EXPECT_EQ(normalize_text("Ça va?"),
              "\xc3\x87"
              "a va");  // non-ASCII bytes kept as they are
    EXPECT_EQ(split_words("a bb ccc"), (std::vector<std::string_view>{"a", "bb", "ccc"}));
    EXPECT_NE(hash_bytes("abc", 1), hash_bytes("abc", 2));
    EXPECT_NE(hash_bytes("abcdefgh", 1), hash_bytes("abcdefgi", 1));
}

std::vector<std::string> random_words(int n, std::mt19937& rng) {
    static const char* vocab[] = {"lord",  "god",    "earth", "heaven", "light", "day",  "night",
                                  "water", "man",    "king",  "son",    "house", "land", "people",
                                  "word",  "spirit", "face",  "hand",   "sea",   "fire", "stone"};
    std::uniform_int_distribution<int> pick(0, 20), suffix(0, 999);
    std::vector<std::string> w;
    for (int i = 0; i < n; ++i)
        w.push_back(std::string(vocab[pick(rng)]).append(std::to_string(suffix(rng))));
    return w;
}

std::string join(const std::vector<std::string>& w) {
    std::string s;
    for (const auto& x : w) s.append(s.empty() ? "" : " ").append(x);
    return s;
}

double jaccard(const std::string& a, const std::string& b, int k) {
    auto shingles = [k](const std::string& t) {
        const auto w = split_words(t);
        std::set<std::string> s;
        for (size_t i = 0; i + k <= w.size(); ++i) {
            std::string sh;
            for (int j = 0; j < k; ++j) sh.append(j ? " " : "").append(w[i + j]);
            s.insert(sh);
        }
        return s;
    };
    const auto sa = shingles(a), sb = shingles(b);
    size_t both = 0;
    for (const auto& x : sa) both += sb.count(x);
    return double(both) / double(sa.size() + sb.size() - both);
}

TEST(MinHash, EstimatesJaccardSimilarity) {
    MinHashParams p;
    p.perm = 256;
    p.shingle = 3;
    const MinHasher h(p);
    std::mt19937 rng(5);
    for (int edits : {0, 2, 5, 10, 20, 40}) {
        auto w = random_words(120, rng);
        const std::string a = join(w);
        std::uniform_int_distribution<int> at(0, 119);
        for (int e = 0; e < edits; ++e) w[at(rng)] = "edited" + std::to_string(e);
        const std::string b = join(w);
        std::vector<uint32_t> sa(256), sb(256);
        h.signature(normalize_text(a), sa.data());
        h.signature(normalize_text(b), sb.data());
        int equal = 0;
        for (int i = 0; i < 256; ++i) equal += sa[i] == sb[i];
        const double s = jaccard(a, b, 3), est = equal / 256.0;
        EXPECT_NEAR(est, s, 5 * std::sqrt(s * (1 - s) / 256) + 1e-12) << edits << " edits";
    }
}

TEST(MinHash, ClustersPlantedCopiesAndNothingElse) {
    MinHashParams p;  // 128 perms, 16 x 8 bands, threshold 0.8
    const MinHasher h(p);
    NearDuplicates near(p);
    std::mt19937 rng(9);
    std::vector<int64_t> truth;  // each document's original
    std::vector<std::string> originals;
    // 200 words, one changed in a copy: Jaccard ~0.95 over 5-word shingles, 7 standard
    // deviations of the 128-permutation estimate above the 0.8 threshold (no chance misses)
    for (int i = 0; i < 60; ++i) originals.push_back(join(random_words(200, rng)));
    std::vector<uint32_t> sig(128);
    std::uniform_int_distribution<int> orig(0, 59), pos(0, 199);
    std::vector<int64_t> first_id(60, -1);
    for (int n = 0; n < 200; ++n) {
        const int o = n < 60 ? n : orig(rng);
        auto w = split_words(originals[o]);
        std::vector<std::string> words(w.begin(), w.end());
        if (n >= 60) words[pos(rng)] = "changed";
        h.signature(normalize_text(join(words)), sig.data());
        const int64_t c = near.add(sig.data());
        if (first_id[o] < 0) first_id[o] = n;
        EXPECT_EQ(c, first_id[o]) << "document " << n << " (a copy of " << o << ")";
    }
}

TEST(Clean, ExactDedupMatchesBruteForceAndThreadsDoNotMatter) {
    const fs::path d = temp_dir("clean");
    std::mt19937 rng(3);
    std::vector<std::string> docs;
    std::string text;
    for (int i = 0; i < 500; ++i) {
        std::string doc;
        if (i > 10 && rng() % 3 == 0) {  // a copy, with case and punctuation changed
            doc = docs[rng() % docs.size()];
            doc[0] = static_cast<char>(std::toupper(doc[0]));
            doc += " ...";
        } else {
            doc = join(random_words(30, rng));
        }
        docs.push_back(doc);
        text += doc + "\n\n";
    }
    write(d / "in.txt", text);
    std::string first;
    for (int threads : {1, 2, 3}) {
        CleanOptions o;
        o.inputs = {(d / "in.txt").string()};
        o.out_dir = (d / ("out" + std::to_string(threads))).string();
        o.near = false;
        o.threads = threads;
        const CleanReport r = clean(o);
        // brute force: a document is kept unless an earlier one normalizes to the same text
        std::string want;
        int64_t kept = 0;
        for (size_t i = 0; i < docs.size(); ++i) {
            bool dup = false;
            for (size_t j = 0; j < i && !dup; ++j)
                dup = normalize_text(docs[j]) == normalize_text(docs[i]);
            if (!dup) {
                want += docs[i] + "\n\n";
                ++kept;
            }
        }
        EXPECT_EQ(r.kept, kept);
        EXPECT_EQ(r.exact_duplicates, 500 - kept);
        EXPECT_GT(r.exact_duplicates, 50);
        EXPECT_EQ(read(fs::path(o.out_dir) / "in.txt"), want);
        if (threads == 1) {  // the HTML report names the step and shows a removed document
            o.report = (d / "report.html").string();
            o.out_dir += "r";
            clean(o);
            const std::string html = read(o.report);
            EXPECT_NE(html.find("<h3>exact</h3>"), std::string::npos);
            EXPECT_NE(html.find("duplicates the kept document"), std::string::npos);
            o.report.clear();
        }
        // with MinHash too: the same output whatever the threads
        o.near = true;
        o.out_dir += "n";
        clean(o);
        const std::string got = read(fs::path(o.out_dir) / "in.txt");
        if (first.empty()) first = got;
        EXPECT_EQ(got, first) << threads << " threads";
    }
}

}  // namespace
}  // namespace syslm::curate
