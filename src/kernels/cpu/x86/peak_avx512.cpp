// AVX-512 peak micro-kernels (see kernels/cpu/peak.hpp). Compiled with the AVX-512 flags
// (including VNNI and BF16); the BF16 kernel is handed out only when the CPU has AVX512_BF16.
// See kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/peak.hpp"
#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

constexpr int kChains = 12;

double fma_f32(int64_t iters, float* sink) {
    __m512 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(0.1f * static_cast<float>(k + 1));
    __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
    for (int64_t i = 0; i < iters; ++i) {
        __asm__ volatile("" : "+v"(a), "+v"(b));
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
    }
    __m512 s = acc[0];
    for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, acc[k]);
    *sink = _mm512_cvtss_f32(s);
    return 2.0 * 16 * kChains * static_cast<double>(iters);
}

// vdpbf16ps: per fp32 lane, two bf16 products added to the accumulator (4 operations).
double dot_bf16(int64_t iters, float* sink) {
    __m512 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(0.1f * static_cast<float>(k + 1));
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
    __m512bh b = (__m512bh)_mm512_set1_epi16(0x3a83);  // bf16 ~0.001
    for (int64_t i = 0; i < iters; ++i) {
        __asm__ volatile("" : "+v"(a), "+v"(b));
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
    }
    __m512 s = acc[0];
    for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, acc[k]);
    *sink = _mm512_cvtss_f32(s);
    return 4.0 * 16 * kChains * static_cast<double>(iters);
}

// vpdpbusd: per s32 lane, four u8 x s8 products added to the accumulator (8 operations).
double dot_int8(int64_t iters, float* sink) {
    __m512i acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_epi32(k);
    __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-7);
    for (int64_t i = 0; i < iters; ++i) {
        __asm__ volatile("" : "+v"(a), "+v"(b));
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
    }
    __m512i s = acc[0];
    for (int k = 1; k < kChains; ++k) s = _mm512_add_epi32(s, acc[k]);
    *sink = static_cast<float>(_mm_cvtsi128_si32(_mm512_castsi512_si128(s)));
    return 8.0 * 16 * kChains * static_cast<double>(iters);
}

float hsum(__m512 v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
    __m128 s = _mm512_castps512_ps128(v);
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

float read_sum(const float* p, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(m, p + i));
    }
    return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void copy(float* dst, const float* src, int64_t n) {
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        _mm512_storeu_ps(dst + i, _mm512_loadu_ps(src + i));
        _mm512_storeu_ps(dst + i + 16, _mm512_loadu_ps(src + i + 16));
        _mm512_storeu_ps(dst + i + 32, _mm512_loadu_ps(src + i + 32));
        _mm512_storeu_ps(dst + i + 48, _mm512_loadu_ps(src + i + 48));
    }
    if (i < n) {
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_loadu_ps(src + i));
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_maskz_loadu_ps(m, src + i));
    }
}

}  // namespace

PeakKernels peak_kernels_avx512(bool with_bf16) {
    return PeakKernels{Isa::Avx512,    fma_f32,           with_bf16 ? dot_bf16 : nullptr,
                       dot_int8,       "vfmadd231ps zmm", with_bf16 ? "vdpbf16ps zmm" : nullptr,
                       "vpdpbusd zmm", read_sum,          copy,
                       nullptr,        nullptr};
}

}  // namespace syslm::kernels::x86
