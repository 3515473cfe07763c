// Near-duplicate documents by MinHash and locality-sensitive hashing (Broder 1997; the scheme of
// datasketch and datatrove). A shingle is `shingle` consecutive normalized words, hashed to 64
// bits; permutation i maps hash h to ((a_i h + b_i) mod 2^64) mod (2^61 - 1), low 32 bits, with
// a_i, b_i from a seeded generator, as datasketch does; a signature is the `perm` minima. LSH
// cuts it into `bands` bands of `rows` values: documents whose band values agree in any band
// are candidates, with probability 1 - (1 - s^rows)^bands for Jaccard similarity s (steepest
// near (1/bands)^(1/rows)). Candidates are verified: the share of equal minima estimates s.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace syslm::curate {

struct MinHashParams {
    int shingle = 5;  // words per shingle
    int perm = 128;   // signature length
    int bands = 16, rows = 8;
    // Estimated Jaccard similarity a candidate pair needs to be a duplicate; 0: every candidate
    // is one (LSH alone, as datasketch's MinHashLSH query).
    double threshold = 0.8;
    uint64_t seed = 1;
};
void check(const MinHashParams& p);  // throws Error naming a bad setting
// The similarity at which a pair becomes a candidate with probability about 1/2 ... the LSH
// curve's steepest point: (1 / bands)^(1 / rows).
double lsh_threshold(int bands, int rows);

class MinHasher {
public:
    explicit MinHasher(const MinHashParams& p);
    // `perm` values into sig. Text shorter than a shingle is one shingle; empty text has every
    // minimum at the maximum.
    void signature(std::string_view normalized, uint32_t* sig) const;

private:
    MinHashParams p_;
    std::vector<uint64_t> a_, b_;
};

// Clusters of near duplicates, documents added in order (ids 0, 1, 2, ...); each cluster is
// named by its first document.
class NearDuplicates {
public:
    explicit NearDuplicates(const MinHashParams& p);
    // Adds the next document; returns its cluster's first document so far (its own id: no
    // duplicate yet).
    int64_t add(const uint32_t* sig);
    // Its cluster's first document now (later documents may have joined clusters).
    int64_t cluster_of(int64_t id);
    int64_t candidate_pairs() const { return candidates_; }  // compared (verification on)

private:
    int64_t find(int64_t x);
    MinHashParams p_;
    std::vector<uint32_t> sigs_;  // kept to verify candidates: perm values per document
    std::vector<int64_t> parent_;
    // Per band: band hash -> one document of each cluster seen with it.
    std::vector<std::unordered_map<uint64_t, std::vector<int64_t>>> buckets_;
    int64_t candidates_ = 0;
};

}  // namespace syslm::curate
