// BF16 x BF16 dot product on AVX512_BF16's vdpbf16ps (two bf16 products per f32 lane per
// instruction). Compiled with the AVX-512 flags; registered only when the CPU reports
// AVX512_BF16 (register.cpp), since that is not part of syslm's AVX-512 tier.
//
// Numeric contract: bf16 products are exact in f32; vdpbf16ps sums them in f32 with
// round-to-nearest-even but treats denormal inputs and results as zero, so the result differs
// from the F32 reference by float summation order plus terms below 2^-126 each.
#include "kernels/cpu/x86/simd.hpp"

#include "kernels/cpu/x86/x86_kernels.hpp"

namespace syslm::kernels::x86 {
namespace {

float hsum(__m512 v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
    __m128 s = _mm512_castps512_ps128(v);
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__m512bh load_bh(const uint16_t* p) {
    return (__m512bh)_mm512_loadu_si512(p);
}

float dot_bf16(int64_t n, const void* xv, const void* yv) {
    const uint16_t* x = static_cast<const uint16_t*>(xv);
    const uint16_t* y = static_cast<const uint16_t*>(yv);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm512_dpbf16_ps(a0, load_bh(x + i), load_bh(y + i));
        a1 = _mm512_dpbf16_ps(a1, load_bh(x + i + 32), load_bh(y + i + 32));
        a2 = _mm512_dpbf16_ps(a2, load_bh(x + i + 64), load_bh(y + i + 64));
        a3 = _mm512_dpbf16_ps(a3, load_bh(x + i + 96), load_bh(y + i + 96));
    }
    for (; i + 32 <= n; i += 32) a0 = _mm512_dpbf16_ps(a0, load_bh(x + i), load_bh(y + i));
    if (i < n) {  // masked tail: zero pairs add nothing
        const __mmask32 m = static_cast<__mmask32>((1ull << (n - i)) - 1);
        a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_maskz_loadu_epi16(m, x + i),
                              (__m512bh)_mm512_maskz_loadu_epi16(m, y + i));
    }
    return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

}  // namespace

void register_bf16_avx512(TypeTraits* rows, int n) {
    if (TypeTraits* r = find_row(rows, n, DType::BF16)) r->vec_dot = dot_bf16;
}

}  // namespace syslm::kernels::x86
