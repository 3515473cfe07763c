// AVX2 GEMM micro-kernel and weight packer (layouts in kernels/cpu/gemm.hpp). Compiled with the
// AVX2 flags; see kernels/isa.hpp for the rules of ISA files.
//
// F32 tile: 6 tokens x 16 rows = 12 ymm accumulators, two panel vectors and the broadcast operand
// in the 16 registers; per k, 2 loads, 6 broadcasts and 12 FMAs. No BF16 panels on AVX2.
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

constexpr int kMr = 6;
constexpr int kNr = 16;

__m256i lane_mask(int n) {  // lanes j < n set
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void tile_f32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
              const float* bias, bool accumulate) {
    __m256 acc[kMr][2];
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        const __m256 w0 = _mm256_loadu_ps(b), w1 = _mm256_loadu_ps(b + 8);
        _mm_prefetch(reinterpret_cast<const char*>(b + 8 * kNr), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int i = 0; i < kMr; ++i) {
            const __m256 x = _mm256_broadcast_ss(a + i);
            acc[i][0] = _mm256_fmadd_ps(x, w0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(x, w1, acc[i][1]);
        }
        a += kMr;
        b += kNr;
    }
    const __m256i m0 = lane_mask(n), m1 = lane_mask(n - 8);
    const __m256 b0 = bias ? _mm256_maskload_ps(bias, m0) : _mm256_setzero_ps();
    const __m256 b1 = bias ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i) {
        if (i >= m) break;
        float* ci = c + i * ldc;
        __m256 v0 = _mm256_add_ps(acc[i][0], b0), v1 = _mm256_add_ps(acc[i][1], b1);
        if (accumulate) {
            v0 = _mm256_add_ps(v0, _mm256_maskload_ps(ci, m0));
            v1 = _mm256_add_ps(v1, _mm256_maskload_ps(ci + 8, m1));
        }
        _mm256_maskstore_ps(ci, m0, v0);
        _mm256_maskstore_ps(ci + 8, m1, v1);
    }
}

// Transposes r[i] (8 rows of 8 values) into t[k] (8 vectors, lane i = row i).
void transpose8(__m256 (&r)[8], __m256 (&t)[8]) {
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    // r[4q + s] holds, in 128-bit lane L, elements k = 4L + s of rows 4q..4q+3.
    for (int s = 0; s < 4; ++s) {
        t[s] = _mm256_permute2f128_ps(r[s], r[4 + s], 0x20);
        t[4 + s] = _mm256_permute2f128_ps(r[s], r[4 + s], 0x31);
    }
}

// 8 rows x 8 floats (rows at stride ld) transposed into dst + k * kNr for k = 0..7.
void transpose8_store(const float* src, int64_t ld, float* dst) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
    transpose8(r, t);
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(dst + k * kNr, t[k]);
}

void pack_f32(const float* rows, int64_t ld, int64_t n_rows, int64_t kc, float* dst) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += kNr, dst += kc * kNr) {
        const int64_t nr = n_rows - r0 < kNr ? n_rows - r0 : kNr;
        const float* src = rows + r0 * ld;
        int64_t k = 0;
        if (nr == kNr) {
            for (; k + 8 <= kc; k += 8) {
                transpose8_store(src + k, ld, dst + k * kNr);
                transpose8_store(src + 8 * ld + k, ld, dst + k * kNr + 8);
            }
        }
        for (; k < kc; ++k)
            for (int64_t r = 0; r < kNr; ++r) dst[k * kNr + r] = r < nr ? src[r * ld + k] : 0.0f;
    }
}

// 8 halves from p (kn <= 8 of them, the rest zero), widened exactly.
__m256 load_f16(const uint16_t* p, int64_t kn) {
    if (kn == 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    alignas(16) uint16_t buf[8] = {};
    for (int64_t j = 0; j < kn; ++j) buf[j] = p[j];
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
}

void pack_f32_from_f16(const uint16_t* rows, int64_t ld, int64_t n_rows, int64_t kc, float* dst) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += kNr, dst += kc * kNr) {
        const int64_t nr = n_rows - r0 < kNr ? n_rows - r0 : kNr;
        const uint16_t* src = rows + r0 * ld;
        for (int64_t k = 0; k < kc; k += 8) {
            const int64_t kn = kc - k < 8 ? kc - k : 8;
            for (int half = 0; half < 2; ++half) {
                __m256 r[8], t[8];
                for (int i = 0; i < 8; ++i) {
                    const int64_t row = 8 * half + i;
                    r[i] = row < nr ? load_f16(src + row * ld + k, kn) : _mm256_setzero_ps();
                }
                transpose8(r, t);
                for (int64_t j = 0; j < kn; ++j)
                    _mm256_storeu_ps(dst + (k + j) * kNr + 8 * half, t[j]);
            }
        }
    }
}

// Activations: 8 k of up to 8 tokens per transpose; lanes past mr are not stored.
void pack_a_f32(const float* x, int64_t ldx, int m, int64_t K, float* dst) {
    const __m256i lanes = lane_mask(kMr);
    for (int64_t k = 0; k < K; k += 8) {
        const int64_t kn = K - k < 8 ? K - k : 8;
        const __m256i km = lane_mask(static_cast<int>(kn));
        __m256 r[8], t[8];
        for (int i = 0; i < 8; ++i)
            r[i] = i < m ? _mm256_maskload_ps(x + i * ldx + k, km) : _mm256_setzero_ps();
        transpose8(r, t);
        for (int64_t j = 0; j < kn; ++j) _mm256_maskstore_ps(dst + (k + j) * kMr, lanes, t[j]);
    }
}

}  // namespace

GemmKernels gemm_kernels_avx2() {
    GemmKernels k{};
    k.isa = Isa::Avx2;
    k.mr_f32 = kMr;
    k.nr_f32 = kNr;
    k.tile_f32 = tile_f32;
    k.pack_f32 = pack_f32;
    k.pack_f32_from_f16 = pack_f32_from_f16;
    k.pack_a_f32 = pack_a_f32;
    return k;
}

}  // namespace syslm::kernels::x86
