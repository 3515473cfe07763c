// AVX-512 GEMM micro-kernels and weight packers (layouts in kernels/cpu/gemm.hpp). Compiled with
// the AVX-512 flags; see kernels/isa.hpp for the rules of ISA files.
//
// F32 tile: 14 tokens x 32 rows = 28 zmm accumulators, two panel vectors and the broadcast
// operand in the 32 registers; per k, 2 loads and 28 FMAs. BF16 tile: the same shape over k
// pairs with vdpbf16ps, twice the multiply-adds per instruction.

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/x86/simd.hpp"
#include "kernels/cpu/x86/transpose_avx512.hpp"

namespace syslm::kernels::x86 {
namespace {

constexpr int kMr = 14;
constexpr int kNr = 32;

// Column masks for the two 16-lane halves of an n-wide tile (n <= 32).
void column_masks(int n, __mmask16& m0, __mmask16& m1) {
    m0 = static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << n) - 1);
    m1 = static_cast<__mmask16>(n >= 32 ? 0xFFFFu : n > 16 ? (1u << (n - 16)) - 1 : 0u);
}

// Writes the accumulators of an mr x 32 tile (rows i < m, columns j < n).
template <int MR>
inline void store_tile(__m512 (&acc)[MR][2], float* c, int64_t ldc, int m, int n, const float* bias,
                       bool accumulate) {
    __mmask16 m0, m1;
    column_masks(n, m0, m1);
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
        if (i >= m) break;
        float* ci = c + i * ldc;
        __m512 v0 = _mm512_add_ps(acc[i][0], b0), v1 = _mm512_add_ps(acc[i][1], b1);
        if (accumulate) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ci));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ci + 16));
        }
        _mm512_mask_storeu_ps(ci, m0, v0);
        _mm512_mask_storeu_ps(ci + 16, m1, v1);
    }
}

void tile_f32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
              const float* bias, bool accumulate) {
    __m512 acc[kMr][2];
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        const __m512 w0 = _mm512_loadu_ps(b), w1 = _mm512_loadu_ps(b + 16);
        _mm_prefetch(reinterpret_cast<const char*>(b + 8 * kNr), _MM_HINT_T0);
#pragma GCC unroll 16
        for (int i = 0; i < kMr; ++i) {
            const __m512 x = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(x, w0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(x, w1, acc[i][1]);
        }
        a += kMr;
        b += kNr;
    }
    store_tile<kMr>(acc, c, ldc, m, n, bias, accumulate);
}

void tile_bf16(int64_t kc2, const uint32_t* a, const uint16_t* b, float* c, int64_t ldc, int m,
               int n, const float* bias, bool accumulate) {
    __m512 acc[kMr][2];
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc2; ++k) {
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512(b);
        const __m512bh w1 = (__m512bh)_mm512_loadu_si512(b + 32);
        _mm_prefetch(reinterpret_cast<const char*>(b + 8 * 2 * kNr), _MM_HINT_T0);
#pragma GCC unroll 16
        for (int i = 0; i < kMr; ++i) {
            const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i]));
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], x, w0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], x, w1);
        }
        a += kMr;
        b += 2 * kNr;
    }
    store_tile<kMr>(acc, c, ldc, m, n, bias, accumulate);
}

// 16 rows x 16 floats (rows at stride ld) transposed into dst + k * kNr for k = 0..15.
void transpose16_store(const float* src, int64_t ld, float* dst) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld);
    transpose16(r, t);
    for (int k = 0; k < 16; ++k) _mm512_storeu_ps(dst + k * kNr, t[k]);
}

void pack_f32(const float* rows, int64_t ld, int64_t n_rows, int64_t kc, float* dst) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += kNr, dst += kc * kNr) {
        const int64_t nr = n_rows - r0 < kNr ? n_rows - r0 : kNr;
        const float* src = rows + r0 * ld;
        int64_t k = 0;
        if (nr == kNr) {
            for (; k + 16 <= kc; k += 16) {
                transpose16_store(src + k, ld, dst + k * kNr);
                transpose16_store(src + 16 * ld + k, ld, dst + k * kNr + 16);
            }
        }
        for (; k < kc; ++k)
            for (int64_t r = 0; r < kNr; ++r) dst[k * kNr + r] = r < nr ? src[r * ld + k] : 0.0f;
    }
}

// Panel of pairs for up to 32 rows: dst[k2][r][2]. A pair of bf16 is one 32-bit word, so this
// is the f32 transpose applied to 32-bit words; odd kc and missing rows are zero-filled.
void pack_bf16_panel(const uint16_t* src, int64_t ld, int64_t nr, int64_t kc, uint16_t* dst) {
    const int64_t kc2 = (kc + 1) / 2;
    int64_t k2 = 0;
    if (nr == kNr && ld % 2 == 0) {  // even ld: every row's pairs are whole words
        for (; k2 + 16 <= kc / 2; k2 += 16) {
            transpose16_store(reinterpret_cast<const float*>(src + 2 * k2), ld / 2,
                              reinterpret_cast<float*>(dst + 2 * k2 * kNr));
            transpose16_store(reinterpret_cast<const float*>(src + 16 * ld + 2 * k2), ld / 2,
                              reinterpret_cast<float*>(dst + 2 * k2 * kNr) + 16);
        }
    }
    for (; k2 < kc2; ++k2)
        for (int64_t r = 0; r < kNr; ++r)
            for (int64_t h = 0; h < 2; ++h) {
                const int64_t k = 2 * k2 + h;
                dst[(k2 * kNr + r) * 2 + h] = r < nr && k < kc ? src[r * ld + k] : uint16_t{0};
            }
}

void pack_bf16(const uint16_t* rows, int64_t ld, int64_t n_rows, int64_t kc, uint16_t* dst) {
    const int64_t kc2 = (kc + 1) / 2;
    for (int64_t r0 = 0; r0 < n_rows; r0 += kNr, dst += kc2 * 2 * kNr)
        pack_bf16_panel(rows + r0 * ld, ld, n_rows - r0 < kNr ? n_rows - r0 : kNr, kc, dst);
}

// 16 floats to bf16, round to nearest even with NaN kept quiet: the same rounding as
// core/half.hpp's f32_to_bf16 (not included here: ISA files must not instantiate external inline
// functions). vcvtneps2bf16 would flush denormals, so the rounding is done on the bits.
__m256i to_bf16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
    return _mm512_cvtepi32_epi16(r);
}

// Rows are rounded to bf16 in chunks of 256 k into a buffer that stays in L1, then packed.
void pack_bf16_from_f32(const float* rows, int64_t ld, int64_t n_rows, int64_t kc, uint16_t* dst) {
    constexpr int64_t kChunk = 256;
    alignas(64) uint16_t buf[kNr * kChunk];
    const int64_t kc2 = (kc + 1) / 2;
    for (int64_t r0 = 0; r0 < n_rows; r0 += kNr, dst += kc2 * 2 * kNr) {
        const int64_t nr = n_rows - r0 < kNr ? n_rows - r0 : kNr;
        for (int64_t k0 = 0; k0 < kc; k0 += kChunk) {
            const int64_t kn = kc - k0 < kChunk ? kc - k0 : kChunk;
            for (int64_t r = 0; r < nr; ++r) {
                const float* s = rows + (r0 + r) * ld + k0;
                uint16_t* b = buf + r * kChunk;
                int64_t k = 0;
                for (; k + 16 <= kn; k += 16)
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b + k),
                                        to_bf16(_mm512_loadu_ps(s + k)));
                if (k < kn) {
                    const __mmask16 m = static_cast<__mmask16>((1u << (kn - k)) - 1);
                    _mm256_mask_storeu_epi16(b + k, m, to_bf16(_mm512_maskz_loadu_ps(m, s + k)));
                }
            }
            pack_bf16_panel(buf, kChunk, nr, kn, dst + k0 * kNr);
        }
    }
}

void pack_f32_from_f16(const uint16_t* rows, int64_t ld, int64_t n_rows, int64_t kc, float* dst) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += kNr, dst += kc * kNr) {
        const int64_t nr = n_rows - r0 < kNr ? n_rows - r0 : kNr;
        const uint16_t* src = rows + r0 * ld;
        for (int64_t k = 0; k < kc; k += 16) {
            const int64_t kn = kc - k < 16 ? kc - k : 16;
            const __mmask16 km = static_cast<__mmask16>((1u << kn) - 1);
            for (int half = 0; half < 2; ++half) {
                __m512 r[16], t[16];
                for (int i = 0; i < 16; ++i) {
                    const int64_t row = 16 * half + i;
                    r[i] = row < nr
                               ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(km, src + row * ld + k))
                               : _mm512_setzero_ps();
                }
                transpose16(r, t);
                for (int64_t j = 0; j < kn; ++j)
                    _mm512_storeu_ps(dst + (k + j) * kNr + 16 * half, t[j]);
            }
        }
    }
}

// Activations: 16 k of up to 16 tokens per transpose; lanes past mr are not stored.
void pack_a_f32(const float* x, int64_t ldx, int m, int64_t K, float* dst) {
    const __mmask16 lanes = static_cast<__mmask16>((1u << kMr) - 1);
    for (int64_t k = 0; k < K; k += 16) {
        const int64_t kn = K - k < 16 ? K - k : 16;
        const __mmask16 km = static_cast<__mmask16>((1u << kn) - 1);
        __m512 r[16], t[16];
        for (int i = 0; i < 16; ++i)
            r[i] = i < m ? _mm512_maskz_loadu_ps(km, x + i * ldx + k) : _mm512_setzero_ps();
        transpose16(r, t);
        for (int64_t j = 0; j < kn; ++j) _mm512_mask_storeu_ps(dst + (k + j) * kMr, lanes, t[j]);
    }
}

// The same on 32-bit words of two bf16: 32 k per transpose.
void pack_a_bf16(const float* x, int64_t ldx, int m, int64_t K, uint32_t* dst) {
    const __mmask16 lanes = static_cast<__mmask16>((1u << kMr) - 1);
    for (int64_t k = 0; k < K; k += 32) {
        const int64_t kn = K - k < 32 ? K - k : 32;
        const __mmask16 m0 = static_cast<__mmask16>(kn >= 16 ? 0xFFFFu : (1u << kn) - 1);
        const __mmask16 m1 = static_cast<__mmask16>(kn >= 32  ? 0xFFFFu
                                                    : kn > 16 ? (1u << (kn - 16)) - 1
                                                              : 0u);
        __m512 r[16], t[16];
        for (int i = 0; i < 16; ++i) {
            if (i < m) {
                const float* xi = x + i * ldx + k;
                const __m256i lo = to_bf16(_mm512_maskz_loadu_ps(m0, xi));
                const __m256i hi = to_bf16(_mm512_maskz_loadu_ps(m1, xi + 16));
                r[i] = _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
            } else {
                r[i] = _mm512_setzero_ps();
            }
        }
        transpose16(r, t);
        const int64_t k2n = (kn + 1) / 2;
        for (int64_t j = 0; j < k2n; ++j)
            _mm512_mask_storeu_ps(reinterpret_cast<float*>(dst + (k / 2 + j) * kMr), lanes, t[j]);
    }
}

// Two rows of up to 16 floats (k and k + 1 of the same 16 columns) rounded to bf16 and
// interleaved into 16 words: the low half from row k, the high half from row k + 1.
__m512i bf16_pairs(const float* row0, const float* row1, __mmask16 m) {
    const __m512i lo = _mm512_cvtepu16_epi32(to_bf16(_mm512_maskz_loadu_ps(m, row0)));
    const __m512i hi = row1 ? _mm512_cvtepu16_epi32(to_bf16(_mm512_maskz_loadu_ps(m, row1)))
                            : _mm512_setzero_si512();
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

// pack_a_bf16 from a transposed source: token i, depth k at x[k * ldx + i]. Each pair of depth
// rows gives one 16-lane word vector, so no transpose is needed.
void pack_a_bf16_t(const float* x, int64_t ldx, int m, int64_t K, uint32_t* dst) {
    const __mmask16 lanes = static_cast<__mmask16>((1u << m) - 1);
    for (int64_t k = 0; k < K; k += 2) {
        const __m512i w = bf16_pairs(x + k * ldx, k + 1 < K ? x + (k + 1) * ldx : nullptr, lanes);
        _mm512_mask_storeu_epi32(dst + k / 2 * kMr, static_cast<__mmask16>((1u << kMr) - 1), w);
    }
}

// pack_bf16_from_f32 from a transposed source: weight row r, depth k at cols[k * ld + r]. Rows
// are contiguous in the source, so a panel's k pair is two 32-float loads.
void pack_bf16_from_f32_t(const float* cols, int64_t ld, int64_t n_rows, int64_t kc,
                          uint16_t* dst) {
    const int64_t kc2 = (kc + 1) / 2;
    for (int64_t r0 = 0; r0 < n_rows; r0 += kNr, dst += kc2 * 2 * kNr) {
        __mmask16 m0, m1;
        column_masks(static_cast<int>(n_rows - r0 < kNr ? n_rows - r0 : kNr), m0, m1);
        for (int64_t k2 = 0; k2 < kc2; ++k2) {
            const float* row0 = cols + 2 * k2 * ld + r0;
            const float* row1 = 2 * k2 + 1 < kc ? row0 + ld : nullptr;
            auto* d = reinterpret_cast<uint32_t*>(dst + k2 * 2 * kNr);
            _mm512_storeu_si512(d, bf16_pairs(row0, row1, m0));
            _mm512_storeu_si512(d + 16, bf16_pairs(row0 + 16, row1 ? row1 + 16 : nullptr, m1));
        }
    }
}

}  // namespace

GemmKernels gemm_kernels_avx512(bool with_bf16) {
    GemmKernels k{};
    k.isa = Isa::Avx512;
    k.mr_f32 = kMr;
    k.nr_f32 = kNr;
    k.tile_f32 = tile_f32;
    k.pack_f32 = pack_f32;
    k.pack_f32_from_f16 = pack_f32_from_f16;
    k.pack_a_f32 = pack_a_f32;
    if (with_bf16) {
        k.pack_a_bf16 = pack_a_bf16;
        k.mr_bf16 = kMr;
        k.nr_bf16 = kNr;
        k.tile_bf16 = tile_bf16;
        k.pack_bf16 = pack_bf16;
        k.pack_bf16_from_f32 = pack_bf16_from_f32;
        k.pack_a_bf16_t = pack_a_bf16_t;
        k.pack_bf16_from_f32_t = pack_bf16_from_f32_t;
    }
    return k;
}

}  // namespace syslm::kernels::x86
