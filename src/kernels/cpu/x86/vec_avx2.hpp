// 8-lane float vector operations for the AVX2 files (attention, element-wise), the "V" the shared
// kernel bodies (attention_body.hpp, elementwise_body.hpp) are written against. Internal linkage
// only (kernels/isa.hpp): include from *_avx2.cpp files only.
#pragma once

#include <cstdint>

#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

struct V256 {
    using T = __m256;
    using M = __m256;  // all-ones / all-zeros lanes
    static constexpr int W = 8;
    // 16 registers: 12 accumulators + operands for the scores, 8 + 2 broadcasts for P.V.
    static constexpr int kScoreRows = 3, kScoreVecs = 4, kPvRows = 2, kPvVecs = 4;

    static T zero() { return _mm256_setzero_ps(); }
    static T set1(float x) { return _mm256_set1_ps(x); }
    static T load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, T x) { _mm256_storeu_ps(p, x); }
    static __m256i first(int n) {  // lanes < n set, n < 8
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    static T load_n(const float* p, int n) { return _mm256_maskload_ps(p, first(n)); }
    static void store_n(float* p, T x, int n) { _mm256_maskstore_ps(p, first(n), x); }
    static T load_h(const uint16_t* p) {  // 8 f16 -> floats (F16C)
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static T load_h_n(const uint16_t* p, int n) {  // no 16-bit masked load in AVX2: via a copy
        alignas(16) uint16_t t[8] = {};
        for (int i = 0; i < n; ++i) t[i] = p[i];
        return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
    }
    static T add(T a, T b) { return _mm256_add_ps(a, b); }
    static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
    static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
    static T div(T a, T b) { return _mm256_div_ps(a, b); }
    static T sqrt(T a) { return _mm256_sqrt_ps(a); }
    static T max(T a, T b) { return _mm256_max_ps(a, b); }
    static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
    static M le(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
    static M both(M a, M b) { return _mm256_and_ps(a, b); }
    static T select(M m, T a, T b) { return _mm256_blendv_ps(b, a, m); }  // m ? a : b
    static T keep(M m, T a) { return _mm256_and_ps(m, a); }               // m ? a : 0
    static float hsum(T v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }

    // e^x as in V512::exp, with 2^n built in the exponent bits: x is clamped to [-87.3, 88.3] so
    // that n stays in the normal range, and x below -87.3 gives 0 (the scalar exp would give a
    // denormal there, < 1.2e-38). About 1 ulp elsewhere.
    static T exp(T x) {
        const T lo = _mm256_set1_ps(-87.33654f);
        const T under = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);  // also false for NaN / -inf
        x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3762626647949f));
        const T n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        T r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
        r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
        T p = _mm256_set1_ps(1.9875691500e-4f);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
        p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
        const __m256i e =
            _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), under);
    }

    struct D {
        __m256d lo, hi;
    };
    static D dzero() { return {_mm256_setzero_pd(), _mm256_setzero_pd()}; }
    static __m256d lo_pd(T x) { return _mm256_cvtps_pd(_mm256_castps256_ps128(x)); }
    static __m256d hi_pd(T x) { return _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)); }
    static void dadd(D& a, T x) {
        a.lo = _mm256_add_pd(a.lo, lo_pd(x));
        a.hi = _mm256_add_pd(a.hi, hi_pd(x));
    }
    static void dadd_sq(D& a, T x) {
        const __m256d l = lo_pd(x), h = hi_pd(x);
        a.lo = _mm256_fmadd_pd(l, l, a.lo);
        a.hi = _mm256_fmadd_pd(h, h, a.hi);
    }
    static void dadd_sqdev(D& a, T x, double mean) {
        const __m256d m = _mm256_set1_pd(mean);
        const __m256d l = _mm256_sub_pd(lo_pd(x), m), h = _mm256_sub_pd(hi_pd(x), m);
        a.lo = _mm256_fmadd_pd(l, l, a.lo);
        a.hi = _mm256_fmadd_pd(h, h, a.hi);
    }
    static double dsum(D a) {
        alignas(32) double t[4];
        _mm256_store_pd(t, _mm256_add_pd(a.lo, a.hi));
        return (t[0] + t[1]) + (t[2] + t[3]);
    }
};

}  // namespace
}  // namespace syslm::kernels::x86
