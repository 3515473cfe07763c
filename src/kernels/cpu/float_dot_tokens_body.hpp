// Several weight rows dotted with several activation rows at once (F32 x F32, F16 x F16), written
// once against a vector type V (V512, V256) and instantiated in the ISA files. Internal linkage.
//
// Why: a target model verifying k drafted tokens, or a few batched sequences, runs its matrices on
// 2..31 tokens, below the packed GEMM's break-even. One dot per (row, token) loads a weight vector
// and an activation vector for every FMA, so the load ports, not the FMA units, set the pace, and
// each extra token costs almost a whole decode step. A tile of R rows x T tokens loads R + T
// vectors for R * T FMAs: each weight vector is read once for all T tokens.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace syslm::kernels {
namespace {

template <class V, class E>
typename V::T load_elems(const E* p) {
    if constexpr (sizeof(E) == 4) return V::load(reinterpret_cast<const float*>(p));
    else return V::load_h(reinterpret_cast<const uint16_t*>(p));
}

template <class V, class E>
typename V::T load_elems_n(const E* p, int n) {
    if constexpr (sizeof(E) == 4) return V::load_n(reinterpret_cast<const float*>(p), n);
    else return V::load_h_n(reinterpret_cast<const uint16_t*>(p), n);
}

// s[t * bs + r] = sum_i x_r[i] * y_t[i] for r < R, t < T.
template <class V, class E, int R, int T>
void dot_tile(int64_t n, const E* const* x, const E* const* y, float* s, size_t bs) {
    using VT = typename V::T;
    VT acc[R][T];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) acc[r][t] = V::zero();
    // T activation vectors, then one weight vector at a time: R * T + T + 1 registers (8 rows x
    // 1 token fits AVX2's 16).
    int64_t i = 0;
    for (; i + V::W <= n; i += V::W) {
        VT a[T];
        for (int t = 0; t < T; ++t) a[t] = load_elems<V>(y[t] + i);
        for (int r = 0; r < R; ++r) {
            const VT w = load_elems<V>(x[r] + i);
            for (int t = 0; t < T; ++t) acc[r][t] = V::fmadd(w, a[t], acc[r][t]);
        }
    }
    if (i < n) {  // masked tail: zeros add nothing
        const int m = static_cast<int>(n - i);
        VT a[T];
        for (int t = 0; t < T; ++t) a[t] = load_elems_n<V>(y[t] + i, m);
        for (int r = 0; r < R; ++r) {
            const VT w = load_elems_n<V>(x[r] + i, m);
            for (int t = 0; t < T; ++t) acc[r][t] = V::fmadd(w, a[t], acc[r][t]);
        }
    }
    for (int t = 0; t < T; ++t)
        for (int r = 0; r < R; ++r) s[t * bs + r] = V::hsum(acc[r][t]);
}

template <class V, class E, int R, int T>
void dot_tile_at(int64_t n, int r0, int t0, const uint8_t* x, size_t bx, const uint8_t* y,
                 size_t by, float* s, size_t bs) {
    const E* xr[R];
    const E* yt[T];
    for (int r = 0; r < R; ++r) xr[r] = reinterpret_cast<const E*>(x + (r0 + r) * bx);
    for (int t = 0; t < T; ++t) yt[t] = reinterpret_cast<const E*>(y + (t0 + t) * by);
    dot_tile<V, E, R, T>(n, xr, yt, s + t0 * bs + r0, bs);
}

using DotTileFn = void (*)(int64_t, int, int, const uint8_t*, size_t, const uint8_t*, size_t,
                          float*, size_t);

// Every tile shape up to 8 rows x 4 tokens, indexed (rows - 1) * 4 + tokens - 1.
template <class V, class E, size_t... I>
constexpr std::array<DotTileFn, sizeof...(I)> dot_tile_table(std::index_sequence<I...>) {
    return {&dot_tile_at<V, E, static_cast<int>(I / 4 + 1), static_cast<int>(I % 4 + 1)>...};
}

// Tiles of R rows x T tokens; the last row and token groups take smaller tiles. Each (row,
// token) gets the same arithmetic whatever the tile (one accumulator, the same order), so the
// tile shape is free: R * T accumulators that fit the registers for several tokens, 8 rows for
// one token (8 independent FMA chains cover the FMA latency).
template <class V, class E, int R, int T>
void dot_rows_tokens(int64_t n, int nr, const void* xv, size_t bx, int nt, const void* yv,
                     size_t by, float* s, size_t bs) {
    static_assert(R >= 1 && R <= 8 && T >= 1 && T <= 4);
    static constexpr auto kTiles = dot_tile_table<V, E>(std::make_index_sequence<32>{});
    const auto* x = static_cast<const uint8_t*>(xv);
    const auto* y = static_cast<const uint8_t*>(yv);
    for (int r0 = 0; r0 < nr; r0 += R) {
        const int rr = std::min(R, nr - r0);
        for (int t0 = 0; t0 < nt; t0 += T) {
            const int tt = std::min(T, nt - t0);
            kTiles[(rr - 1) * 4 + tt - 1](n, r0, t0, x, bx, y, by, s, bs);
        }
    }
}

// The TypeTraits entries. Several tokens: tiles of R rows x 4 tokens (R * 4 accumulators that fit
// the ISA's registers); one token: 8 rows at a time (8 independent FMA chains cover the FMA
// latency). Both give each (row, token) the same sums, so batching never changes a result.
template <class V, class E>
void dot_rows_one_token(int64_t n, int nr, const void* x, size_t bx, const void* y, float* s) {
    dot_rows_tokens<V, E, 8, 1>(n, nr, x, bx, 1, y, 0, s, 0);
}
template <class V, class E, int R>
void dot_rows_many_tokens(int64_t n, int nr, const void* x, size_t bx, int nt, const void* y,
                          size_t by, float* s, size_t bs) {
    if (nt == 1) dot_rows_one_token<V, E>(n, nr, x, bx, y, s);
    else dot_rows_tokens<V, E, R, 4>(n, nr, x, bx, nt, y, by, s, bs);
}

}  // namespace
}  // namespace syslm::kernels
