// AVX-512 dot products of float rows (F32 x F32, F16 x F16). Compiled with the AVX-512 flags; see
// kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/simd.hpp"

#include "kernels/cpu/x86/vec_avx512.hpp"
#include "kernels/cpu/x86/x86_kernels.hpp"
#include "kernels/cpu/float_dot_tokens_body.hpp"

namespace syslm::kernels::x86 {
namespace {

// Lane shuffles instead of _mm512_reduce_add_ps / extracts, whose GCC 12 header trips a false
// -Wuninitialized.
float hsum(__m512 v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));  // + the other 256-bit half
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));  // + the neighbouring 128-bit lane
    __m128 s = _mm512_castps512_ps128(v);
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

float dot_f32(int64_t n, const void* xv, const void* yv) {
    const float* x = static_cast<const float*>(xv);
    const float* y = static_cast<const float*>(yv);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    if (i < n) {  // masked tail: no scalar loop
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), a1);
    }
    return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

__m512 load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// F16 rows: 16 halves widened per vector; the tail is a masked load (zeros add nothing).
float dot_f16(int64_t n, const void* xv, const void* yv) {
    const uint16_t* x = static_cast<const uint16_t*>(xv);
    const uint16_t* y = static_cast<const uint16_t*>(yv);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
        a1 = _mm512_fmadd_ps(load_f16(x + i + 16), load_f16(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(load_f16(x + i + 32), load_f16(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(load_f16(x + i + 48), load_f16(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 xv16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        const __m512 yv16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, y + i));
        a1 = _mm512_fmadd_ps(xv16, yv16, a1);
    }
    return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

}  // namespace

void register_float_avx512(TypeTraits* rows, int n) {
    if (TypeTraits* r = find_row(rows, n, DType::F32)) {
        r->vec_dot = dot_f32;
        r->vec_dot_rows = dot_rows_one_token<V512, float>;
        r->vec_dot_tokens = dot_rows_many_tokens<V512, float, 4>;  // 4 rows: 16 of 32 registers
    }
    if (TypeTraits* r = find_row(rows, n, DType::F16)) {
        r->vec_dot = dot_f16;
        r->vec_dot_rows = dot_rows_one_token<V512, uint16_t>;
        r->vec_dot_tokens = dot_rows_many_tokens<V512, uint16_t, 4>;
    }
}

}  // namespace syslm::kernels::x86
