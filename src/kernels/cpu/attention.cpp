// Tiled causal attention with an online softmax (FlashAttention-style), for prefill and decode.
//
// Work is split into jobs of (tile of query tokens, KV head, slice of positions). A job walks the
// visible KV positions in blocks; each K/V row of a block is loaded once and used for every query
// head of the GQA group and every token of the tile while it is in L1. Scores never exist beyond
// one block: per (token, head) the job keeps the running max m, the running sum l and the
// unnormalised output acc, rescaled when the max grows. When there are fewer (tile, head) jobs
// than threads — decode with few KV heads — the positions are split into slices whose partial
// (m, l, acc) are merged afterwards (flash-decoding).
#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/type_traits.hpp"

namespace syslm::kernels {
namespace {

constexpr int64_t kTileTokens = 16;     // query tokens per job
constexpr int64_t kBlockPositions = 64;  // KV positions per block
constexpr int64_t kMinSlice = 256;       // don't split the positions finer than this

struct Partial {  // running softmax state of one (token, head)
    float m, l;
};

// acc += w * v over d elements (vectorised by the compiler: no reduction).
void axpy(float* __restrict acc, float w, const float* __restrict v, int d) {
    for (int i = 0; i < d; ++i) acc[i] += w * v[i];
}

void scale(float* acc, float s, int d) {
    for (int i = 0; i < d; ++i) acc[i] *= s;
}

}  // namespace

void attention(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
               int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool) {
    const int D = s.head_dim, G = s.n_head / s.n_head_kv;
    const int64_t q_stride = static_cast<int64_t>(s.n_head) * D;
    const int64_t n_tiles = (n_tokens + kTileTokens - 1) / kTileTokens;
    const VecDotFn dot = type_traits(DType::F32).vec_dot;
    const int64_t last_pos = pos0 + n_tokens - 1;
    const int64_t first_pos = s.window > 0 ? std::max<int64_t>(0, pos0 - s.window + 1) : 0;
    const int64_t span = last_pos - first_pos + 1;  // positions any token of the batch may see

    // Position slices: only when the (tile, head) jobs cannot keep every thread busy.
    int64_t n_slices = 1;
    const int64_t jobs = n_tiles * s.n_head_kv;
    if (jobs < pool.size())
        n_slices = std::clamp<int64_t>((pool.size() + jobs - 1) / jobs, 1,
                                       std::max<int64_t>(1, span / kMinSlice));
    const int64_t slice_len = (span + n_slices - 1) / n_slices;

    // Per (slice, token, head): partial state and unnormalised output.
    const size_t n_state = static_cast<size_t>(n_slices * n_tokens * s.n_head);
    thread_local std::vector<Partial> state;
    thread_local std::vector<float> accs;
    state.resize(n_state);
    accs.resize(n_state * D);
    Partial* st = state.data();
    float* acc_all = accs.data();

    pool.parallel_for(jobs * n_slices, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<float> scores;
        scores.resize(static_cast<size_t>(kBlockPositions));
        for (int64_t job = b; job < e; ++job) {
            const int64_t slice = job % n_slices;
            const int hk = static_cast<int>((job / n_slices) % s.n_head_kv);
            const int64_t tile = job / n_slices / s.n_head_kv;
            const int64_t t0 = tile * kTileTokens, t1 = std::min(n_tokens, t0 + kTileTokens);
            const int64_t lo = first_pos + slice * slice_len;
            const int64_t hi = std::min(last_pos + 1, lo + slice_len);  // exclusive
            const int64_t kv_off = static_cast<int64_t>(hk) * D;

            for (int64_t t = t0; t < t1; ++t)
                for (int g = 0; g < G; ++g) {
                    const size_t i = static_cast<size_t>((slice * n_tokens + t) * s.n_head +
                                                         hk * G + g);
                    st[i] = {-INFINITY, 0.0f};
                    std::fill_n(acc_all + i * D, D, 0.0f);
                }
            for (int64_t p0 = lo; p0 < hi; p0 += kBlockPositions) {
                const int64_t p1 = std::min(hi, p0 + kBlockPositions);
                for (int64_t t = t0; t < t1; ++t) {
                    const int64_t pos = pos0 + t;
                    // Visible part of this block for this token: causal and inside the window.
                    const int64_t a = std::max(p0, s.window > 0 ? pos - s.window + 1 : p0);
                    const int64_t z = std::min(p1, pos + 1);
                    if (a >= z) continue;
                    for (int g = 0; g < G; ++g) {
                        const int h = hk * G + g;
                        const float* qv = q + t * q_stride + static_cast<int64_t>(h) * D;
                        const size_t i = static_cast<size_t>((slice * n_tokens + t) * s.n_head + h);
                        float* acc = acc_all + i * D;
                        float mx = st[i].m;
                        for (int64_t p = a; p < z; ++p) {
                            const float sc = dot(D, qv, k_cache + p * s.kv_stride + kv_off) * s.scale;
                            scores[p - a] = sc;
                            mx = std::max(mx, sc);
                        }
                        if (mx > st[i].m) {  // rescale what was accumulated under the old max
                            const float c = std::exp(st[i].m - mx);
                            st[i].l *= c;
                            scale(acc, c, D);
                            st[i].m = mx;
                        }
                        for (int64_t p = a; p < z; ++p) {
                            const float w = std::exp(scores[p - a] - mx);
                            st[i].l += w;
                            axpy(acc, w, v_cache + p * s.kv_stride + kv_off, D);
                        }
                    }
                }
            }
        }
    });

    // Merge the slices and normalise: out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int h = 0; h < s.n_head; ++h) {
            float M = -INFINITY;
            for (int64_t sl = 0; sl < n_slices; ++sl)
                M = std::max(M, st[(sl * n_tokens + t) * s.n_head + h].m);
            float* o = out + t * q_stride + static_cast<int64_t>(h) * D;
            std::fill_n(o, D, 0.0f);
            double L = 0;
            for (int64_t sl = 0; sl < n_slices; ++sl) {
                const size_t i = static_cast<size_t>((sl * n_tokens + t) * s.n_head + h);
                if (st[i].l == 0.0f) continue;  // slice saw no visible position
                const float c = std::exp(st[i].m - M);
                L += static_cast<double>(st[i].l) * c;
                axpy(o, c, acc_all + i * D, D);
            }
            scale(o, static_cast<float>(1.0 / L), D);
        }
}

}  // namespace syslm::kernels
