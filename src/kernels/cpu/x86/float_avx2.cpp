// AVX2 + FMA + F16C dot products of float rows (F32 x F32, F16 x F16, BF16 x BF16), and the F32 ->
// F16 conversion (activations for F16 matrices, the F16 KV cache). Compiled with
// -mavx2 -mfma -mf16c; see kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/simd.hpp"

#include <algorithm>

#include "kernels/cpu/x86/x86_kernels.hpp"

namespace syslm::kernels::x86 {
namespace {

float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__m256 load_f32(const float* p) {
    return _mm256_loadu_ps(p);
}
float f32_scalar(float v) {
    return v;
}

__m256 load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
float f16_scalar(uint16_t h) {
    return _cvtsh_ss(h);
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

// One dot product for every float storage type: Load widens 8 elements to F32, Scalar one (for
// the tail). Four independent accumulators hide the FMA latency. (Internal linkage: the
// instantiations stay in this ISA file.)
template <class T, __m256 (*Load)(const T*), float (*Scalar)(T)>
float dot(int64_t n, const void* xv, const void* yv) {
    const T* x = static_cast<const T*>(xv);
    const T* y = static_cast<const T*>(yv);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(Load(x + i), Load(y + i), a0);
        a1 = _mm256_fmadd_ps(Load(x + i + 8), Load(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(Load(x + i + 16), Load(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(Load(x + i + 24), Load(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(Load(x + i), Load(y + i), a0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; ++i) sum += Scalar(x[i]) * Scalar(y[i]);
    return sum;
}

// Round to nearest even, as core/half.hpp's f32_to_f16 (bit-identical for every non-NaN input).
void to_f16(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<uint16_t*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) y[i] = static_cast<uint16_t>(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

// Several tokens against one weight row, each (row, token) summed exactly as dot() sums it alone
// (the same four accumulators, tail and reduction), so a token's logits do not depend on what it
// is batched with; each weight vector is loaded once for NT tokens (2: 8 accumulators and 4
// weight vectors fit the 16 registers). One token keeps dot() (decode streams rows best so).
template <class T, __m256 (*Load)(const T*), float (*Scalar)(T), int NT>
void dot_row_tokens(int64_t n, const T* x, const uint8_t* y, size_t by, float* s, size_t bs) {
    const T* yt[NT];
    for (int t = 0; t < NT; ++t) yt[t] = reinterpret_cast<const T*>(y + t * by);
    __m256 acc[NT][4];
    for (int t = 0; t < NT; ++t)
        for (int k = 0; k < 4; ++k) acc[t][k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256 w0 = Load(x + i), w1 = Load(x + i + 8), w2 = Load(x + i + 16),
                     w3 = Load(x + i + 24);
        for (int t = 0; t < NT; ++t) {
            acc[t][0] = _mm256_fmadd_ps(w0, Load(yt[t] + i), acc[t][0]);
            acc[t][1] = _mm256_fmadd_ps(w1, Load(yt[t] + i + 8), acc[t][1]);
            acc[t][2] = _mm256_fmadd_ps(w2, Load(yt[t] + i + 16), acc[t][2]);
            acc[t][3] = _mm256_fmadd_ps(w3, Load(yt[t] + i + 24), acc[t][3]);
        }
    }
    const int64_t vec_end = i + (n - i) / 8 * 8;
    for (int t = 0; t < NT; ++t) {
        __m256 a0 = acc[t][0];
        for (int64_t j = i; j < vec_end; j += 8)
            a0 = _mm256_fmadd_ps(Load(x + j), Load(yt[t] + j), a0);
        float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, acc[t][1]),
                                       _mm256_add_ps(acc[t][2], acc[t][3])));
        for (int64_t j = vec_end; j < n; ++j) sum += Scalar(x[j]) * Scalar(yt[t][j]);
        s[t * bs] = sum;
    }
}

template <class T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void dot_tokens(int64_t n, int nr, const void* xv, size_t bx, int nt, const void* yv, size_t by,
                float* s, size_t bs) {
    const auto* x = static_cast<const uint8_t*>(xv);
    const auto* y = static_cast<const uint8_t*>(yv);
    for (int r = 0; r < nr; ++r) {
        const T* xr = reinterpret_cast<const T*>(x + r * bx);
        for (int t0 = 0; t0 < nt; t0 += 2) {
            float* st = s + t0 * bs + r;
            if (nt - t0 == 1)
                st[0] = dot<T, Load, Scalar>(n, xr, y + t0 * by);
            else
                dot_row_tokens<T, Load, Scalar, 2>(n, xr, y + t0 * by, by, st, bs);
        }
    }
}

}  // namespace

void register_float_avx2(TypeTraits* rows, int n) {
    if (TypeTraits* r = find_row(rows, n, DType::F32)) {
        r->vec_dot = dot<float, load_f32, f32_scalar>;
        r->vec_dot_tokens = dot_tokens<float, load_f32, f32_scalar>;
    }
    if (TypeTraits* r = find_row(rows, n, DType::F16)) {
        r->vec_dot = dot<uint16_t, load_f16, f16_scalar>;
        r->vec_dot_tokens = dot_tokens<uint16_t, load_f16, f16_scalar>;
        r->from_float_fast = to_f16;
    }
    if (TypeTraits* r = find_row(rows, n, DType::BF16))
        r->vec_dot = dot<uint16_t, load_bf16, bf16_scalar>;
}

}  // namespace syslm::kernels::x86
