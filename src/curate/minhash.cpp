#include "curate/minhash.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.hpp"
#include "curate/normalize.hpp"

namespace syslm::curate {

namespace {
constexpr uint64_t kPrime = (uint64_t{1} << 61) - 1;  // Mersenne: x mod p by shifts and adds
}

void check(const MinHashParams& p) {
    SYSLM_CHECK(p.shingle >= 1 && p.shingle <= 64, "minhash: --shingle ", p.shingle,
                " words: expected 1 to 64");
    SYSLM_CHECK(p.perm >= 1 && p.perm <= 4096, "minhash: --perm ", p.perm,
                ": expected 1 to 4096 permutations");
    SYSLM_CHECK(p.bands >= 1 && p.rows >= 1 && p.bands * p.rows <= p.perm, "minhash: ", p.bands,
                " bands x ", p.rows, " rows need ", p.bands * p.rows, " of ", p.perm,
                " permutations");
    SYSLM_CHECK(p.threshold >= 0 && p.threshold <= 1, "minhash: --threshold ", p.threshold,
                " is not in [0, 1]");
}

double lsh_threshold(int bands, int rows) {
    return std::pow(1.0 / bands, 1.0 / rows);
}

MinHasher::MinHasher(const MinHashParams& p) : p_(p) {
    check(p);
    std::mt19937_64 rng(p.seed);
    std::uniform_int_distribution<uint64_t> da(1, kPrime - 1), db(0, kPrime - 1);
    for (int i = 0; i < p.perm; ++i) {
        a_.push_back(da(rng));
        b_.push_back(db(rng));
    }
}

void MinHasher::signature(std::string_view normalized, uint32_t* sig) const {
    const int k = p_.perm;
    std::fill(sig, sig + k, std::numeric_limits<uint32_t>::max());
    const std::vector<std::string_view> words = split_words(normalized);
    if (words.empty()) return;
    const size_t n = words.size() < static_cast<size_t>(p_.shingle)
                         ? 1
                         : words.size() - static_cast<size_t>(p_.shingle) + 1;
    const size_t span = std::min(words.size(), static_cast<size_t>(p_.shingle));
    for (size_t s = 0; s < n; ++s) {
        // the shingle's bytes run from its first word to its last one in the normalized text
        const char* begin = words[s].data();
        const char* end = words[s + span - 1].data() + words[s + span - 1].size();
        const uint64_t h = hash_bytes({begin, static_cast<size_t>(end - begin)}, p_.seed);
        for (int i = 0; i < k; ++i) {
            uint64_t x = a_[i] * h + b_[i];  // mod 2^64, then mod p
            x = (x & kPrime) + (x >> 61);
            x = x >= kPrime ? x - kPrime : x;
            sig[i] = std::min(sig[i], static_cast<uint32_t>(x));
        }
    }
}

NearDuplicates::NearDuplicates(const MinHashParams& p)
    : p_(p), buckets_(static_cast<size_t>(p.bands)) {
    check(p);
}

int64_t NearDuplicates::find(int64_t x) {
    while (parent_[x] != x) {
        parent_[x] = parent_[parent_[x]];
        x = parent_[x];
    }
    return x;
}

int64_t NearDuplicates::cluster_of(int64_t id) {
    return find(id);
}

int64_t NearDuplicates::add(const uint32_t* sig) {
    const auto id = static_cast<int64_t>(parent_.size());
    parent_.push_back(id);
    const bool verify = p_.threshold > 0;
    if (verify) sigs_.insert(sigs_.end(), sig, sig + p_.perm);
    const uint32_t* mine = verify ? sigs_.data() + id * p_.perm : sig;
    for (int b = 0; b < p_.bands; ++b) {
        std::string_view band(reinterpret_cast<const char*>(mine + b * p_.rows),
                              sizeof(uint32_t) * static_cast<size_t>(p_.rows));
        std::vector<int64_t>& bucket = buckets_[static_cast<size_t>(b)][hash_bytes(band, b)];
        bool joined = false;  // this bucket already holds a document of id's cluster
        for (const int64_t other : bucket) {
            if (find(other) == find(id)) {
                joined = true;
                continue;
            }
            if (verify) {
                ++candidates_;
                const uint32_t* theirs = sigs_.data() + other * p_.perm;
                int equal = 0;
                for (int i = 0; i < p_.perm; ++i) equal += mine[i] == theirs[i];
                if (equal < p_.threshold * p_.perm) continue;
            }
            const int64_t ra = find(other), rb = find(id);  // the earlier document names it
            parent_[std::max(ra, rb)] = std::min(ra, rb);
            joined = true;
        }
        if (!joined) bucket.push_back(id);
    }
    return find(id);
}

}  // namespace syslm::curate
