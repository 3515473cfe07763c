// Quantized blocks on whole 512-bit vectors (AVX-512): the dot products of the K-quants
// (Q2_K..Q6_K) with Q8_K, and dequantization (to_float) of the types prefill's GEMM reads.
//
// Each vector holds the levels of 64 consecutive elements, so the activation quants load as
// they are stored; where a block keeps two 32-element groups in one 32-byte chunk (low and high
// nibbles, successive bit planes), the chunk is broadcast to both halves and the upper half
// shifted once. vpmaddubsw makes int16 pair sums and vpdpwssd multiplies them by the scales
// (permuted once per super-block) into int32 lanes: no horizontal sum per super-block, which is
// what bound the 256-bit kernels of quant_dot_body.hpp (sum_lanes8, per-block scalar sums) on
// Intel cores, where those shuffles share one port. Each super-block's lanes are scaled and
// summed in float; lanes are exact integers.
//
// int16 range: a pair sum is at most 2 * 63 * 128 = 16128 (levels below 64, |y| <= 128).
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/x86/quant_helpers.hpp"
#include "kernels/cpu/x86/simd.hpp"
#include "kernels/cpu/x86/x86_kernels.hpp"
#include "kernels/quants/block_layouts.hpp"

namespace syslm::kernels::x86 {
namespace {

template <int... K, typename F>
void unroll_impl(std::integer_sequence<int, K...>, F&& f) {
    (f(std::integral_constant<int, K>{}), ...);
}

// f(std::integral_constant<int, k>) for k = 0..N-1: shift counts stay compile-time constants.
template <int N, typename F>
void unroll(F&& f) {
    unroll_impl(std::make_integer_sequence<int, N>{}, f);
}

// The 32 bytes at p in both 256-bit halves.
__m512i bcast256(const void* p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

// v with its upper 256 bits shifted right by S (16-bit lanes).
template <int S>
__m512i shift_upper(__m512i v) {
    return _mm512_mask_srli_epi16(v, 0xFFFF0000u, v, S);
}

// Bit K of every byte moved to bit P, all other bits cleared (bits crossing into the
// neighbouring byte never land on bit P).
template <int K, int P>
__m512i bit_to(__m512i v) {
    __m512i moved;
    if constexpr (K < P) moved = _mm512_slli_epi16(v, P - K);
    else if constexpr (K > P) moved = _mm512_srli_epi16(v, K - P);
    else moved = v;
    return _mm512_and_si512(moved, _mm512_set1_epi8(static_cast<char>(1 << P)));
}

// Index vectors for vpermw: int16 lane j of vector k takes scale 2k + j/16 (a scale per 32
// elements) or 4k + j/8 (a scale per 16 elements).
template <int PerScale>
struct ScaleIndex {
    __m512i v[4];
    ScaleIndex() {
        for (int k = 0; k < 4; ++k) {
            alignas(64) int16_t idx[32];
            for (int j = 0; j < 32; ++j)
                idx[j] = static_cast<int16_t>((64 / PerScale) * k + j / (PerScale / 2));
            v[k] = _mm512_load_si512(idx);
        }
    }
};

// isum + sum over 64 elements of u * y * scale (scale16: one int16 per pair of elements).
__m512i dot64(__m512i isum, __m512i u, const int8_t* y, __m512i scale16) {
    return _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(u, _mm512_loadu_si512(y)), scale16);
}

__m512i zext(__m256i v) {
    return _mm512_zextsi256_si512(v);
}

float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Levels of elements 64k..64k+63 of a Q4_K/Q5_K block: chunk k of qs holds 64k..64k+31 in its
// low nibbles and 64k+32..64k+63 in its high ones; Q5_K's 5th bit of element 32b + l is bit b
// of qh[l] (hb: qh broadcast, its upper half shifted right by 1, so both halves use bit 2k).
template <int k, bool HighBit, typename Block>
__m512i k4_levels(const Block& b, __m512i hb) {
    __m512i u = _mm512_and_si512(shift_upper<4>(bcast256(b.qs + 32 * k)), _mm512_set1_epi8(0x0F));
    if constexpr (HighBit) u = _mm512_or_si512(u, bit_to<2 * k, 4>(hb));
    return u;
}

// Levels (0..63) of the Q6_K half h: u0 = elements 128h + 0..63 (low nibbles of ql[64h..+64)
// with qh bits 0-1 | 2-3), u1 = 128h + 64..127 (high nibbles, qh bits 4-5 | 6-7).
template <int h>
void q6_levels(const BlockQ6_K& b, __m512i& u0, __m512i& u1) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
    const __m512i l = _mm512_loadu_si512(b.ql + 64 * h);
    const __m512i q = shift_upper<2>(bcast256(b.qh + 32 * h));
    u0 = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_slli_epi16(q, 4), m2));
    u1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(q, m2));
}

// A Q4_K / Q5_K block's 8 scales as int16 lanes 0-7, and its 8 mins as int16 lanes 2j and
// 2j + 1 (each min covers two bsums of 16).
inline void k4_scales_mins16(const uint8_t* scales, __m512i& sc16, __m256i& m16) {
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    uint64_t sc8, mn8;
    k4_scales_mins(scales, sc8, mn8);
    sc16 = zext(_mm256_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc8))));
    m16 = _mm256_cvtepu8_epi16(
        _mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<long long>(mn8)), dup));
}

// Q4_K (HighBit = false) and Q5_K against Q8_K; the mins go through the bsums.
template <typename Block, bool HighBit>
float dot_k4(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const Block*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const ScaleIndex<32> idx;
    __m512 acc = _mm512_setzero_ps();
    __m256 acc_min = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(x + i);
        __m512i sc16;
        __m256i m16;
        k4_scales_mins16(x[i].scales, sc16, m16);
        const __m256i msum = _mm256_madd_epi16(m16, _mm256_loadu_si256(
                                                        reinterpret_cast<const __m256i*>(y[i].bsums)));
        __m512i hb = _mm512_setzero_si512();
        if constexpr (HighBit) hb = shift_upper<1>(bcast256(x[i].qh));  // upper: bit 2k+1 at 2k
        __m512i isum = _mm512_setzero_si512();
        unroll<4>([&](auto K) {
            constexpr int k = decltype(K)::value;
            const __m512i u = k4_levels<k, HighBit>(x[i], hb);
            isum = dot64(isum, u, y[i].qs + 64 * k, _mm512_permutexvar_epi16(idx.v[k], sc16));
        });
        const float dy = y[i].d;
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dy * f16(x[i].d)), acc);
        acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dy * f16(x[i].dmin)),
                                  acc_min);
    }
    return _mm512_reduce_add_ps(acc) - hsum256(acc_min);
}

float dot_q4_k(int64_t n, const void* x, const void* y) {
    return dot_k4<BlockQ4_K, false>(n, x, y);
}

float dot_q5_k(int64_t n, const void* x, const void* y) {
    return dot_k4<BlockQ5_K, true>(n, x, y);
}

// sum over the 16 groups of 16 of scale * bsum, as 8 int32 lanes (scales16: 16 int16).
__m256i scaled_bsums(__m256i scales16, const int16_t* bsums) {
    return _mm256_madd_epi16(scales16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums)));
}

// Where the integer sum starts for levels stored with an offset 2^Log2: -2^Log2 * sum over the
// 16 groups of scale * bsum (the offset's share of sum scale * level * y).
template <int Log2>
__m512i offset_start(__m256i scales16, const int16_t* bsums) {
    const __m256i off = _mm256_slli_epi32(scaled_bsums(scales16, bsums), Log2);
    return _mm512_sub_epi32(_mm512_setzero_si512(), zext(off));
}

// Q6_K: levels u in [0, 63] stand for u - 32; the -32 goes through the bsums.
float dot_q6_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ6_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const ScaleIndex<16> idx;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(x + i);
        const __m256i sc16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
        const __m512i sc = zext(sc16);
        __m512i isum = offset_start<5>(sc16, y[i].bsums);
        unroll<2>([&](auto H) {
            constexpr int h = decltype(H)::value;
            __m512i u0, u1;
            q6_levels<h>(x[i], u0, u1);
            isum = dot64(isum, u0, y[i].qs + 128 * h, _mm512_permutexvar_epi16(idx.v[2 * h], sc));
            isum = dot64(isum, u1, y[i].qs + 128 * h + 64,
                         _mm512_permutexvar_epi16(idx.v[2 * h + 1], sc));
        });
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(y[i].d * f16(x[i].d)),
                              acc);
    }
    return _mm512_reduce_add_ps(acc);
}

// ---- several tokens per weight block (batched decode steps, drafts): each block's levels and
// scales are unpacked once for up to four tokens; per token the operations of the one-token dot
// above in the same order, so each result is bit for bit that dot's. The one-token dots stay
// written apart: as the NT = 1 case of these, L1B Q4_K_M decode measured 3-5% slower (Zen 4) ----

// Q4_K / Q5_K against NT tokens (Q8_K rows `by` bytes apart); s[t * bs] = dot_k4 of token t.
template <typename Block, bool HighBit, int NT>
void dot_k4_nt(int64_t n, const Block* x, const uint8_t* yb, size_t by, float* s, size_t bs) {
    const ScaleIndex<32> idx;
    __m512 acc[NT];
    __m256 acc_min[NT];
    for (int t = 0; t < NT; ++t) {
        acc[t] = _mm512_setzero_ps();
        acc_min[t] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(x + i);
        __m512i sc16;
        __m256i m16;
        k4_scales_mins16(x[i].scales, sc16, m16);
        __m512i hb = _mm512_setzero_si512();
        if constexpr (HighBit) hb = shift_upper<1>(bcast256(x[i].qh));
        __m512i u[4], sc[4];
        unroll<4>([&](auto K) {
            constexpr int k = decltype(K)::value;
            u[k] = k4_levels<k, HighBit>(x[i], hb);
            sc[k] = _mm512_permutexvar_epi16(idx.v[k], sc16);
        });
        const float dx = f16(x[i].d), dmin = f16(x[i].dmin);
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(yb + t * by)[i];
            const __m256i msum = _mm256_madd_epi16(
                m16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)));
            __m512i isum = _mm512_setzero_si512();
            for (int k = 0; k < 4; ++k) isum = dot64(isum, u[k], y.qs + 64 * k, sc[k]);
            const float dy = y.d;
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dy * dx), acc[t]);
            acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dy * dmin),
                                         acc_min[t]);
        }
    }
    for (int t = 0; t < NT; ++t) s[t * bs] = _mm512_reduce_add_ps(acc[t]) - hsum256(acc_min[t]);
}

// Q6_K against NT tokens; s[t * bs] = dot_q6_k of token t.
template <int NT>
void dot_q6_k_nt(int64_t n, const BlockQ6_K* x, const uint8_t* yb, size_t by, float* s,
                 size_t bs) {
    const ScaleIndex<16> idx;
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(x + i);
        const __m256i sc16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
        const __m512i sc = zext(sc16);
        __m512i u[4], scp[4];
        q6_levels<0>(x[i], u[0], u[1]);
        q6_levels<1>(x[i], u[2], u[3]);
        for (int k = 0; k < 4; ++k) scp[k] = _mm512_permutexvar_epi16(idx.v[k], sc);
        const float dx = f16(x[i].d);
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(yb + t * by)[i];
            __m512i isum = offset_start<5>(sc16, y.bsums);
            for (int k = 0; k < 4; ++k) isum = dot64(isum, u[k], y.qs + 64 * k, scp[k]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(y.d * dx), acc[t]);
        }
    }
    for (int t = 0; t < NT; ++t) s[t * bs] = _mm512_reduce_add_ps(acc[t]);
}

// NT tokens against one row of Block (Q4_K, Q5_K or Q6_K); one token: the one-token dot itself.
template <typename Block>
struct KQuantTokens {
    template <int NT>
    static void run(int64_t n, const Block* x, const uint8_t* y, size_t by, float* s, size_t bs) {
        if constexpr (std::is_same_v<Block, BlockQ6_K>) {
            if constexpr (NT == 1) *s = dot_q6_k(n, x, y);
            else dot_q6_k_nt<NT>(n, x, y, by, s, bs);
        } else {
            constexpr bool high_bit = std::is_same_v<Block, BlockQ5_K>;
            if constexpr (NT == 1) *s = dot_k4<Block, high_bit>(n, x, y);
            else dot_k4_nt<Block, high_bit, NT>(n, x, y, by, s, bs);
        }
    }
};

// The 2-bit planes of Q2_K and Q3_K: element 128h + 32p + l is bits 2p..2p+1 of qs[32h + l].
// Vector k = 2h + j holds planes 2j (lower half) and 2j + 1 (upper half).
template <int K>
__m512i planes2(__m512i q_half) {
    return _mm512_and_si512(_mm512_srli_epi16(q_half, 4 * (K % 2)), _mm512_set1_epi8(3));
}

// Q3_K: levels u = low 2 bits | hmask bit << 2 in [0, 7] stand for u - 4; the -4 goes through
// the bsums. The 3rd bit of element 32b + l is bit b of hmask[l].
float dot_q3_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ3_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const ScaleIndex<16> idx;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(x + i);
        const __m256i sc16 = _mm256_cvtepi8_epi16(q3_k_scales(x[i].scales));
        const __m512i sc = zext(sc16);
        __m512i isum = offset_start<2>(sc16, y[i].bsums);
        const __m512i hm = shift_upper<1>(bcast256(x[i].hmask));  // upper: bit 2k+1 at 2k
        unroll<2>([&](auto H) {
            constexpr int h = decltype(H)::value;
            const __m512i q = shift_upper<2>(bcast256(x[i].qs + 32 * h));
            unroll<2>([&](auto J) {
                constexpr int k = 2 * h + decltype(J)::value;
                const __m512i u = _mm512_or_si512(planes2<k>(q), bit_to<2 * k, 2>(hm));
                isum = dot64(isum, u, y[i].qs + 64 * k, _mm512_permutexvar_epi16(idx.v[k], sc));
            });
        });
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(y[i].d * f16(x[i].d)),
                              acc);
    }
    return _mm512_reduce_add_ps(acc);
}

// Q2_K: levels q in [0, 3]; x = d * sc * q - dmin * m per 16 elements (scales: low nibble,
// mins: high nibble).
float dot_q2_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ2_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const ScaleIndex<16> idx;
    const __m128i lo4 = _mm_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    __m256 acc_min = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(x + i);
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
        const __m512i sc = zext(_mm256_cvtepu8_epi16(_mm_and_si128(packed, lo4)));
        const __m256i mins = scaled_bsums(
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), lo4)), y[i].bsums);
        __m512i isum = _mm512_setzero_si512();
        unroll<2>([&](auto H) {
            constexpr int h = decltype(H)::value;
            const __m512i q = shift_upper<2>(bcast256(x[i].qs + 32 * h));
            unroll<2>([&](auto J) {
                constexpr int k = 2 * h + decltype(J)::value;
                isum = dot64(isum, planes2<k>(q), y[i].qs + 64 * k,
                             _mm512_permutexvar_epi16(idx.v[k], sc));
            });
        });
        const float dy = y[i].d;
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dy * f16(x[i].d)), acc);
        acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(dy * f16(x[i].dmin)),
                                  acc_min);
    }
    return _mm512_reduce_add_ps(acc) - hsum256(acc_min);
}

// Q8_0_G8W x Q8_0_G8 (load-time layouts, block_layouts.hpp): per group of 8 blocks, four
// 64-byte vpdpbusd of the weights (q + 128, unsigned) with the activations (signed), each
// folded to 8 lanes (two blocks: lanes 0-3 and 4-7); three rounds of vphaddd leave the 8 block
// sums in slot order, 128 x the activations' block sums removes the offset, one FMA scales all
// 8 — as the Q4_0_G8 kernel, without unpacking nibbles.
float dot_q8_0_g8w(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ8_0G8W*>(vx);
    const auto* y = static_cast<const BlockQ8_0G8*>(vy);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / (kG8Blocks * QK8_0); ++i) {
        prefetch_ahead(x + i);
        __m256i pair[4];
        for (int p = 0; p < 4; ++p) {
            const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                  _mm512_loadu_si512(x[i].qs + 64 * p),
                                                  _mm512_loadu_si512(y[i].qs + 64 * p));
            pair[p] = _mm256_add_epi32(_mm512_castsi512_si256(d), _mm512_extracti64x4_epi64(d, 1));
        }
        if (i % 2 == 0)
            acc0 = g8_group_fma<7>(pair, y[i].s, x[i].d, y[i].d, acc0);
        else
            acc1 = g8_group_fma<7>(pair, y[i].s, x[i].d, y[i].d, acc1);
    }
    return hsum256(_mm256_add_ps(acc0, acc1));
}

// Q8_0_G8W against up to four tokens at once: each weight group is loaded once for all of them.
// Per token the operations of dot_q8_0_g8w in the same order: each result is bit for bit its.
template <int NT>
void dot_q8_0_g8w_nt(int64_t n, const BlockQ8_0G8W* x, const uint8_t* yb, size_t by, float* s,
                     size_t bs) {
    __m256 acc0[NT], acc1[NT];
    for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / (kG8Blocks * QK8_0); ++i) {
        prefetch_ahead(x + i);
        __m512i w[4];
        for (int p = 0; p < 4; ++p) w[p] = _mm512_loadu_si512(x[i].qs + 64 * p);
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_0G8& y = reinterpret_cast<const BlockQ8_0G8*>(yb + t * by)[i];
            __m256i pair[4];
            for (int p = 0; p < 4; ++p) {
                const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[p],
                                                      _mm512_loadu_si512(y.qs + 64 * p));
                pair[p] =
                    _mm256_add_epi32(_mm512_castsi512_si256(d), _mm512_extracti64x4_epi64(d, 1));
            }
            if (i % 2 == 0)
                acc0[t] = g8_group_fma<7>(pair, y.s, x[i].d, y.d, acc0[t]);
            else
                acc1[t] = g8_group_fma<7>(pair, y.s, x[i].d, y.d, acc1[t]);
        }
    }
    for (int t = 0; t < NT; ++t) s[t * bs] = hsum256(_mm256_add_ps(acc0[t], acc1[t]));
}

struct Q8_0G8WTokens {
    template <int NT>
    static void run(int64_t n, const BlockQ8_0G8W* x, const uint8_t* y, size_t by, float* s,
                    size_t bs) {
        if constexpr (NT == 1) *s = dot_q8_0_g8w(n, x, y);
        else dot_q8_0_g8w_nt<NT>(n, x, y, by, s, bs);
    }
};

// ---- dequantization (to_float), bit-identical to the scalar references: the same float
// operations in the same order (mul, then sub; no fused multiply-add) ----------------------------

// 64 bytes of levels (unsigned, or signed with `offset` subtracted) times per-16-element scales
// dl[0..3] minus per-16 ml[0..3], to 64 floats.
template <bool Signed>
void levels_to_float(__m512i u, const float* dl, const float* ml, float* y) {
    unroll<4>([&](auto J) {
        constexpr int j = decltype(J)::value;
        const __m128i b = _mm512_extracti32x4_epi32(u, j);
        const __m512i v = Signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
        __m512 f = _mm512_mul_ps(_mm512_set1_ps(dl[j]), _mm512_cvtepi32_ps(v));
        if (ml) f = _mm512_sub_ps(f, _mm512_set1_ps(ml[j]));
        _mm512_storeu_ps(y + 16 * j, f);
    });
}

template <typename Block, bool HighBit>
void dequant_k4(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const Block*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
        uint64_t sc8, mn8;
        k4_scales_mins(x[i].scales, sc8, mn8);
        const float d = f16(x[i].d), dmin = f16(x[i].dmin);
        __m512i hb = _mm512_setzero_si512();
        if constexpr (HighBit) hb = shift_upper<1>(bcast256(x[i].qh));
        unroll<4>([&](auto K) {
            constexpr int k = decltype(K)::value;
            const __m512i u = k4_levels<k, HighBit>(x[i], hb);
            const float sc0 = static_cast<float>((sc8 >> (16 * k)) & 0xFF);
            const float sc1 = static_cast<float>((sc8 >> (16 * k + 8)) & 0xFF);
            const float m0 = static_cast<float>((mn8 >> (16 * k)) & 0xFF);
            const float m1 = static_cast<float>((mn8 >> (16 * k + 8)) & 0xFF);
            const float dl[4] = {d * sc0, d * sc0, d * sc1, d * sc1};
            const float ml[4] = {dmin * m0, dmin * m0, dmin * m1, dmin * m1};
            levels_to_float<false>(u, dl, ml, y + 64 * k);
        });
    }
}

void dequant_q4_k(const void* src, float* y, int64_t n) {
    dequant_k4<BlockQ4_K, false>(src, y, n);
}

void dequant_q5_k(const void* src, float* y, int64_t n) {
    dequant_k4<BlockQ5_K, true>(src, y, n);
}

void dequant_q6_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ6_K*>(src);
    const __m512i c32 = _mm512_set1_epi8(32);
    for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
        const float d = f16(x[i].d);
        float dl[16];
        for (int s = 0; s < 16; ++s) dl[s] = d * static_cast<float>(x[i].scales[s]);
        unroll<2>([&](auto H) {
            constexpr int h = decltype(H)::value;
            __m512i u0, u1;
            q6_levels<h>(x[i], u0, u1);
            levels_to_float<true>(_mm512_sub_epi8(u0, c32), dl + 8 * h, nullptr, y + 128 * h);
            levels_to_float<true>(_mm512_sub_epi8(u1, c32), dl + 8 * h + 4, nullptr,
                                  y + 128 * h + 64);
        });
    }
}

void dequant_q8_0(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ8_0*>(src);
    for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
        const __m512 d = _mm512_set1_ps(f16(x[i].d));
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                              _mm256_castsi256_si128(q))), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                   _mm256_extracti128_si256(q, 1))), d));
    }
}

void dequant_q4_0(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ4_0*>(src);
    const __m128i m4 = _mm_set1_epi8(0x0F), c8 = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) {
        const __m512 d = _mm512_set1_ps(f16(x[i].d));
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs));
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, m4), c8);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), c8);
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d));
    }
}

// The load-time layout of Q4_0 (block_layouts.hpp): the same numbers, so the same arithmetic as
// dequant_q4_0 per block, with the scale read from its slot. Prefill's GEMM dequantizes every
// Q4_0 matrix through this once per call.
void dequant_q4_0_g8(const void* src, float* y, int64_t n) {
    const auto* g = static_cast<const BlockQ4_0G8*>(src);
    const __m128i m4 = _mm_set1_epi8(0x0F), c8 = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / (kG8Blocks * QK4_0); ++i)
        for (int b = 0; b < kG8Blocks; ++b, y += QK4_0) {
            const __m512 d = _mm512_set1_ps(f16(g[i].d[kG8Slot[b]]));
            const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g[i].qs + 16 * b));
            const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, m4), c8);
            const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), c8);
            _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d));
            _mm512_storeu_ps(y + 16,
                             _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d));
        }
}

// Q8_0_G8W: as dequant_q8_0 per block, the quants gathered back from the pair order.
void dequant_q8_0_g8w(const void* src, float* y, int64_t n) {
    const auto* g = static_cast<const BlockQ8_0G8W*>(src);
    const __m128i c128 = _mm_set1_epi8(static_cast<char>(0x80));
    for (int64_t i = 0; i < n / (kG8Blocks * QK8_0); ++i)
        for (int b = 0; b < kG8Blocks; ++b, y += QK8_0) {
            const __m512 d = _mm512_set1_ps(f16(g[i].d[kG8Slot[b]]));
            for (int half = 0; half < 2; ++half) {
                // q + 128 as u8 -> q as s8: flip the top bit.
                const uint8_t* q = g[i].qs + g8_pair_offset(b, half);
                const __m128i v =
                    _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), c128);
                _mm512_storeu_ps(y + 16 * half,
                                 _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)), d));
            }
        }
}

}  // namespace

void register_quant_zmm_avx512(TypeTraits* rows, int n) {
    const struct {
        DType type;
        VecDotFn fn;
    } dots[] = {{DType::Q2_K, dot_q2_k}, {DType::Q3_K, dot_q3_k}, {DType::Q4_K, dot_q4_k},
                {DType::Q5_K, dot_q5_k}, {DType::Q6_K, dot_q6_k}, {DType::Q8_0_G8W, dot_q8_0_g8w}};
    // A multi-row kernel registered below this tier runs the old vec_dot's arithmetic: drop it,
    // so that every path of these types gives this vec_dot's bits.
    for (const auto& d : dots)
        if (TypeTraits* r = find_row(rows, n, d.type)) {
            r->vec_dot = d.fn;
            r->vec_dot_rows = nullptr;
        }
    const struct {
        DType type;
        VecDotTokensFn fn;
    } tokens[] = {{DType::Q4_K, dot_tokens_by4<BlockQ4_K, KQuantTokens<BlockQ4_K>>},
                  {DType::Q5_K, dot_tokens_by4<BlockQ5_K, KQuantTokens<BlockQ5_K>>},
                  {DType::Q6_K, dot_tokens_by4<BlockQ6_K, KQuantTokens<BlockQ6_K>>},
                  {DType::Q8_0_G8W, dot_tokens_by4<BlockQ8_0G8W, Q8_0G8WTokens>}};
    for (const auto& d : tokens)
        if (TypeTraits* r = find_row(rows, n, d.type)) r->vec_dot_tokens = d.fn;
    const struct {
        DType type;
        ToFloatFn fn;
    } deqs[] = {{DType::Q4_K, dequant_q4_k}, {DType::Q5_K, dequant_q5_k},
                {DType::Q6_K, dequant_q6_k}, {DType::Q8_0, dequant_q8_0},
                {DType::Q4_0, dequant_q4_0}, {DType::Q4_0_G8, dequant_q4_0_g8},
                {DType::Q8_0_G8W, dequant_q8_0_g8w}};
    for (const auto& d : deqs)
        if (TypeTraits* r = find_row(rows, n, d.type)) r->to_float = d.fn;
}

}  // namespace syslm::kernels::x86
