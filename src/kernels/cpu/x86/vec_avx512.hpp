// 16-lane float vector operations for the AVX-512 files (attention, element-wise), the "V" the
// shared kernel bodies (attention_body.hpp, elementwise_body.hpp) are written against. Internal
// linkage only (kernels/isa.hpp): include from *_avx512.cpp and *_amx.cpp files only.
#pragma once

#include <cstdint>

#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

struct V512 {
    using T = __m512;
    using M = __mmask16;
    static constexpr int W = 16;
    // Register blocking: scores tile (K rows x query vectors), P.V tile (query rows x D vectors).
    static constexpr int kScoreRows = 6, kScoreVecs = 4, kPvRows = 4, kPvVecs = 4;

    static T zero() { return _mm512_setzero_ps(); }
    static T set1(float x) { return _mm512_set1_ps(x); }
    static T load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, T x) { _mm512_storeu_ps(p, x); }
    static M first(int n) { return static_cast<M>((1u << n) - 1); }  // n < 16
    static T load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(first(n), p); }
    static void store_n(float* p, T x, int n) { _mm512_mask_storeu_ps(p, first(n), x); }
    static T load_h(const uint16_t* p) {  // 16 f16 -> floats
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static T load_h_n(const uint16_t* p, int n) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first(n), p));
    }
    static T add(T a, T b) { return _mm512_add_ps(a, b); }
    static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
    static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
    static T div(T a, T b) { return _mm512_div_ps(a, b); }
    static T sqrt(T a) { return _mm512_sqrt_ps(a); }
    static T max(T a, T b) { return _mm512_max_ps(a, b); }
    static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
    static M le(T a, T b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
    static M both(M a, M b) { return static_cast<M>(a & b); }
    static T select(M m, T a, T b) { return _mm512_mask_blend_ps(m, b, a); }  // m ? a : b
    static T keep(M m, T a) { return _mm512_maskz_mov_ps(m, a); }             // m ? a : 0
    static float hsum(T v) {  // lane shuffles: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized
        v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
        v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
        __m128 s = _mm512_castps512_ps128(v);
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }

    // e^x: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so n ln2 is exact), e^r by Cephes'
    // degree-6 polynomial, times 2^n with vscalefps, which also produces the denormals and the
    // 0 / inf of very negative / large x. About 1 ulp on the float range.
    static T exp(T x) {
        x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.8f));
        const T n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        T r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
        r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
        T p = _mm512_set1_ps(1.9875691500e-4f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
        p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
        return _mm512_scalef_ps(p, n);
    }

    // Double accumulators for the norms' sums (the scalar reference sums in double).
    struct D {
        __m512d lo, hi;
    };
    static D dzero() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
    static __m512d lo_pd(T x) { return _mm512_cvtps_pd(_mm512_castps512_ps256(x)); }
    static __m512d hi_pd(T x) {
        return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    }
    static void dadd(D& a, T x) {
        a.lo = _mm512_add_pd(a.lo, lo_pd(x));
        a.hi = _mm512_add_pd(a.hi, hi_pd(x));
    }
    static void dadd_sq(D& a, T x) {  // a += x^2
        const __m512d l = lo_pd(x), h = hi_pd(x);
        a.lo = _mm512_fmadd_pd(l, l, a.lo);
        a.hi = _mm512_fmadd_pd(h, h, a.hi);
    }
    static void dadd_sqdev(D& a, T x, double mean) {  // a += (x - mean)^2
        const __m512d m = _mm512_set1_pd(mean);
        const __m512d l = _mm512_sub_pd(lo_pd(x), m), h = _mm512_sub_pd(hi_pd(x), m);
        a.lo = _mm512_fmadd_pd(l, l, a.lo);
        a.hi = _mm512_fmadd_pd(h, h, a.hi);
    }
    static double dsum(D a) {
        alignas(64) double t[8];
        _mm512_store_pd(t, _mm512_add_pd(a.lo, a.hi));
        return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
    }
};

}  // namespace
}  // namespace syslm::kernels::x86
