// BigBird's random key blocks (attention.hpp): which blocks a query block draws, and the pairs
// they add. The draw depends only on (seed, query block), so every caller (training, the
// contiguous and the paged caches, one token or a whole prompt at a time) sees the same mask.
#include <algorithm>

#include "core/error.hpp"
#include "kernels/cpu/attention.hpp"

namespace syslm::kernels {
namespace {

int64_t floor_div(int64_t a, int64_t b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// The candidate blocks [c0, c1) of query block qb (random_key_blocks).
std::pair<int64_t, int64_t> candidates(const AttentionShape& s, int64_t qb) {
    const int64_t B = s.random_block_size;
    const int64_t c0 = (int64_t{s.global_tokens} + B - 1) / B;
    const int64_t c1 = floor_div(qb * B - s.window + 1, B);
    return {c0, std::max(c0, c1)};
}

}  // namespace

bool has_random_blocks(const AttentionShape& s) {
    return s.window > 0 && s.random_blocks > 0;
}

int random_key_blocks(const AttentionShape& s, int64_t qb, int64_t* out) {
    if (!has_random_blocks(s)) return 0;
    SYSLM_CHECK(s.random_blocks <= kMaxRandomBlocks && s.random_block_size >= kMinRandomBlockSize,
                "attention: ", s.random_blocks, " random blocks of ", s.random_block_size,
                " positions (at most ", kMaxRandomBlocks, " of at least ", kMinRandomBlockSize,
                ")");
    const auto [c0, c1] = candidates(s, qb);
    const int64_t n = c1 - c0;
    const int m = static_cast<int>(std::min<int64_t>(s.random_blocks, n));
    if (m == n) {
        for (int i = 0; i < m; ++i) out[i] = c0 + i;
        return m;
    }
    // Floyd: for j = n - m .. n - 1 take x < j + 1 at random, or j itself when x is taken.
    const uint64_t key = splitmix64(s.random_seed ^ splitmix64(static_cast<uint64_t>(qb)));
    int k = 0;
    for (int64_t j = n - m; j < n; ++j) {
        const int64_t x = static_cast<int64_t>(splitmix64(key + static_cast<uint64_t>(j)) %
                                               static_cast<uint64_t>(j + 1));
        const bool taken = std::find(out, out + k, x) != out + k;
        out[k++] = taken ? j : x;
    }
    std::sort(out, out + m);
    for (int i = 0; i < m; ++i) out[i] += c0;
    return m;
}

double random_block_pairs(const AttentionShape& s, int64_t n_tokens, int64_t pos0) {
    if (!has_random_blocks(s) || n_tokens <= 0) return 0;
    const int64_t B = s.random_block_size, last = pos0 + n_tokens - 1;
    double pairs = 0;
    for (int64_t qb = pos0 / B; qb <= last / B; ++qb) {
        const auto [c0, c1] = candidates(s, qb);
        const int64_t queries = std::min(last, qb * B + B - 1) - std::max(pos0, qb * B) + 1;
        pairs += static_cast<double>(queries) * static_cast<double>(B) *
                 static_cast<double>(std::min<int64_t>(s.random_blocks, c1 - c0));
    }
    return pairs;
}

double attention_pairs(const AttentionShape& s, int64_t n_tokens, int64_t pos0) {
    if (s.linear)  // the FLOPs of its d x d updates and reads, as pairs of 4 n_head d FLOPs
        return static_cast<double>(n_tokens) * s.head_dim * (s.n_head + s.n_head_kv) /
               (2.0 * s.n_head);
    return attention_pairs(n_tokens, pos0, s.window, s.window > 0 ? s.global_tokens : 0) +
           random_block_pairs(s, n_tokens, pos0);
}

}  // namespace syslm::kernels
