// Helpers the quantized-block kernel files share (quant_dot_body.hpp, quant_zmm_avx512.cpp,
// dequant_avx2.cpp): unaligned scalar loads, f16 widening, the K-quants' packed scales, Q6_K's
// levels, and the software prefetch of the weight stream. Internal linkage, included only by ISA
// files (kernels/isa.hpp), so no ISA-compiled copy can serve code that runs on an older CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/x86/simd.hpp"
#include "kernels/quants/block_layouts.hpp"

namespace syslm::kernels::x86 {
namespace {

// The weight stream is prefetched 4 KiB ahead: on an Intel Xeon the hardware prefetchers alone
// left memory and compute unoverlapped in these compute-heavy loops (L1B decode +40-60%).
inline constexpr int kPrefetchBytes = 4096;

template <typename Block>
void prefetch_ahead(const Block* b) {
    const char* p = reinterpret_cast<const char*>(b) + kPrefetchBytes;
    for (size_t off = 0; off < sizeof(Block); off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

inline uint32_t load_u32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline float f16(uint16_t h) {
    return _cvtsh_ss(h);
}

// Bit k of every byte moved to bit `pos` of the same byte, all other bits cleared. Shifting
// 16-bit lanes lets bits cross into the neighbouring byte, but never onto bit `pos`.
inline __m256i bit_to(__m256i v, int k, int pos) {
    const __m256i moved = k < pos ? _mm256_slli_epi16(v, pos - k) : _mm256_srli_epi16(v, k - pos);
    return _mm256_and_si256(moved, _mm256_set1_epi8(static_cast<char>(1 << pos)));
}

// v[0..7] read as an 8 x 8 matrix of int32 transposed in place: the move between a block's file
// order and lane order (block_layouts.hpp), either way, on its level vectors or its Q8_K quants.
inline void transpose8x8_epi32(__m256i (&v)[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        v[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

// Q4_K/Q5_K: 8 six-bit scales and mins from 12 bytes (block_layouts.hpp), as 8 bytes each.
inline void k4_scales_mins(const uint8_t* s, uint64_t& scales, uint64_t& mins) {
    const uint32_t a = load_u32(s), b = load_u32(s + 4), c = load_u32(s + 8);
    const uint32_t lo6 = 0x3F3F3F3Fu, lo4 = 0x0F0F0F0Fu, top = 0x30303030u;
    const uint32_t sc_lo = a & lo6, sc_hi = (c & lo4) | ((a >> 2) & top);
    const uint32_t m_lo = b & lo6, m_hi = ((c >> 4) & lo4) | ((b >> 2) & top);
    scales = sc_lo | (static_cast<uint64_t>(sc_hi) << 32);
    mins = m_lo | (static_cast<uint64_t>(m_hi) << 32);
}

// Q6_K's levels u in [0, 63] (unsigned: u - 32 is the value) of half h of block b, in four
// runs of 32 elements: the low nibbles of ql[0..31] / ql[32..63], then their high nibbles; the
// two high bits come from successive bit pairs of qh.
inline void q6_k_levels(const BlockQ6_K& b, int h, __m256i (&q)[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    q[0] =
        _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
    q[1] =
        _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
    q[2] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
}

// Q3_K's 16 six-bit scales (stored + 32), unpacked to int8 (see block_layouts.hpp).
inline __m128i q3_k_scales(const uint8_t* s) {
    const uint32_t a = load_u32(s), b = load_u32(s + 4), c = load_u32(s + 8);
    const uint32_t lo4 = 0x0F0F0F0Fu, lo2 = 0x03030303u;
    const uint32_t s0 = (a & lo4) | ((c & lo2) << 4);
    const uint32_t s1 = (b & lo4) | (((c >> 2) & lo2) << 4);
    const uint32_t s2 = ((a >> 4) & lo4) | (((c >> 4) & lo2) << 4);
    const uint32_t s3 = ((b >> 4) & lo4) | (((c >> 6) & lo2) << 4);
    const __m128i u = _mm_setr_epi32(static_cast<int>(s0), static_cast<int>(s1),
                                     static_cast<int>(s2), static_cast<int>(s3));
    return _mm_sub_epi8(u, _mm_set1_epi8(32));
}

// The end of one group of a G8 dot (Q4_0_G8 and Q8_0_G8W against Q8_0_G8, block_layouts.hpp):
// four vectors of pair sums (lanes 0-3 one block, 4-7 the next) folded by three rounds of
// vphaddd into the 8 block sums in slot order, less 2^Shift (the weights' level offset) times
// each activation block's quant sum, scaled by both blocks' scales, added to acc.
template <int Shift>
inline __m256 g8_group_fma(const __m256i (&pair)[4], const int32_t* y_sums, const uint16_t* x_d,
                           const float* y_d, __m256 acc) {
    __m256i sums = _mm256_hadd_epi32(_mm256_hadd_epi32(pair[0], pair[1]),
                                     _mm256_hadd_epi32(pair[2], pair[3]));
    sums = _mm256_sub_epi32(
        sums, _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y_sums)), Shift));
    const __m256 scale =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x_d))),
                      _mm256_loadu_ps(y_d));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
}

// vec_dot_tokens over nr rows of Block with a kernel of up to four tokens per weight load:
// Kernel::template run<NT>(n, row, y, by, s, bs) writes s[t * bs] for t < NT. Tokens go four at a
// time, the rest in one call (NT = 1: the type's one-token dot).
template <typename Block, typename Kernel>
void dot_tokens_by4(int64_t n, int nr, const void* vx, size_t bx, int nt, const void* vy,
                    size_t by, float* s, size_t bs) {
    const auto* xb = static_cast<const uint8_t*>(vx);
    const auto* yb = static_cast<const uint8_t*>(vy);
    for (int r = 0; r < nr; ++r) {
        const auto* x = reinterpret_cast<const Block*>(xb + r * bx);
        int t = 0;
        for (; t + 4 <= nt; t += 4)
            Kernel::template run<4>(n, x, yb + t * by, by, s + t * bs + r, bs);
        const uint8_t* y = yb + t * by;
        float* st = s + t * bs + r;
        switch (nt - t) {
            case 3: Kernel::template run<3>(n, x, y, by, st, bs); break;
            case 2: Kernel::template run<2>(n, x, y, by, st, bs); break;
            case 1: Kernel::template run<1>(n, x, y, by, st, bs); break;
            default: break;
        }
    }
}

}  // namespace
}  // namespace syslm::kernels::x86
