// AVX2 + FMA + F16C dot products of float rows (F32 x F32, F16 x F16, BF16 x BF16). Compiled with
// -mavx2 -mfma -mf16c; see kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/simd.hpp"

#include "kernels/cpu/x86/x86_kernels.hpp"

namespace syslm::kernels::x86 {
namespace {

float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Four independent accumulators hide the FMA latency.
float dot_f32(int64_t n, const void* xv, const void* yv) {
    const float* x = static_cast<const float*>(xv);
    const float* y = static_cast<const float*>(yv);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; ++i) sum += x[i] * y[i];
    return sum;
}

__m256 load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

float dot_f16(int64_t n, const void* xv, const void* yv) {
    const uint16_t* x = static_cast<const uint16_t*>(xv);
    const uint16_t* y = static_cast<const uint16_t*>(yv);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16(x + i + 8), load_f16(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16(x + i + 16), load_f16(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16(x + i + 24), load_f16(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; ++i) sum += _cvtsh_ss(x[i]) * _cvtsh_ss(y[i]);
    return sum;
}

// BF16 is the top half of an F32: widen to 32 bits and shift into place. Products and sums in
// F32 as for F16 (the fallback for CPUs without AVX512_BF16).
__m256 load_bf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

float bf16_scalar(uint16_t h) {
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(h) << 16)));
}

float dot_bf16(int64_t n, const void* xv, const void* yv) {
    const uint16_t* x = static_cast<const uint16_t*>(xv);
    const uint16_t* y = static_cast<const uint16_t*>(yv);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16(x + i + 8), load_bf16(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_bf16(x + i + 16), load_bf16(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_bf16(x + i + 24), load_bf16(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), a0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; ++i) sum += bf16_scalar(x[i]) * bf16_scalar(y[i]);
    return sum;
}

}  // namespace

void register_float_avx2(TypeTraits* rows, int n) {
    if (TypeTraits* r = find_row(rows, n, DType::F32)) r->vec_dot = dot_f32;
    if (TypeTraits* r = find_row(rows, n, DType::F16)) r->vec_dot = dot_f16;
    if (TypeTraits* r = find_row(rows, n, DType::BF16)) r->vec_dot = dot_bf16;
}

}  // namespace syslm::kernels::x86
