// AVX2 peak micro-kernels (see kernels/cpu/peak.hpp). Compiled with -mavx2 -mfma -mf16c; see
// kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/peak.hpp"
#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

constexpr int kChains = 12;  // 2 FMA pipes x 4-5 cycles latency, with headroom

double fma_f32(int64_t iters, float* sink) {
    __m256 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(0.1f * static_cast<float>(k + 1));
    __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-4f);
    for (int64_t i = 0; i < iters; ++i) {
        __asm__ volatile("" : "+x"(a), "+x"(b));
        for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
    }
    __m256 s = acc[0];
    for (int k = 1; k < kChains; ++k) s = _mm256_add_ps(s, acc[k]);
    *sink = _mm256_cvtss_f32(s);
    return 2.0 * 8 * kChains * static_cast<double>(iters);
}

// Without VNNI, a u8 x s8 dot product takes vpmaddubsw (pairs into s16) + vpmaddwd (pairs of
// s16 into s32) + vpaddd, as ggml's AVX2 quantized dot products do.
double dot_int8(int64_t iters, float* sink) {
    __m256i acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_epi32(k);
    __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-7);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < iters; ++i) {
        __asm__ volatile("" : "+x"(a), "+x"(b));
        for (int k = 0; k < kChains; ++k)
            acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    }
    __m256i s = acc[0];
    for (int k = 1; k < kChains; ++k) s = _mm256_add_epi32(s, acc[k]);
    *sink = static_cast<float>(_mm256_cvtsi256_si32(s));
    return 2.0 * 32 * kChains * static_cast<double>(iters);
}

float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

float read_sum(const float* p, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
    }
    float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; ++i) s += p[i];
    return s;
}

void copy(float* dst, const float* src, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
        _mm256_storeu_ps(dst + i + 8, _mm256_loadu_ps(src + i + 8));
        _mm256_storeu_ps(dst + i + 16, _mm256_loadu_ps(src + i + 16));
        _mm256_storeu_ps(dst + i + 24, _mm256_loadu_ps(src + i + 24));
    }
    for (; i < n; ++i) dst[i] = src[i];
}

}  // namespace

PeakKernels peak_kernels_avx2() {
    return PeakKernels{Isa::Avx2,
                       fma_f32,
                       nullptr,
                       dot_int8,
                       "vfmadd231ps ymm",
                       nullptr,
                       "vpmaddubsw+vpmaddwd+vpaddd ymm",
                       read_sum,
                       copy,
                       nullptr,
                       nullptr};
}

}  // namespace syslm::kernels::x86
