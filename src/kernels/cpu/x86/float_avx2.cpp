// AVX2 + FMA + F16C dot products of float rows (F32 x F32, F16 x F16, BF16 x BF16), and the F32 ->
// F16 conversion (activations for F16 matrices, the F16 KV cache). Compiled with
// -mavx2 -mfma -mf16c; see kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/simd.hpp"

#include "kernels/cpu/x86/vec_avx2.hpp"
#include "kernels/cpu/x86/x86_kernels.hpp"
#include "kernels/cpu/float_dot_tokens_body.hpp"

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

}  // namespace

void register_float_avx2(TypeTraits* rows, int n) {
    if (TypeTraits* r = find_row(rows, n, DType::F32)) {
        r->vec_dot = dot<float, load_f32, f32_scalar>;
        r->vec_dot_rows = dot_rows_one_token<V256, float>;
        r->vec_dot_tokens = dot_rows_many_tokens<V256, float, 2>;  // 2 rows: 8 of 16 registers
    }
    if (TypeTraits* r = find_row(rows, n, DType::F16)) {
        r->vec_dot = dot<uint16_t, load_f16, f16_scalar>;
        r->vec_dot_rows = dot_rows_one_token<V256, uint16_t>;
        r->vec_dot_tokens = dot_rows_many_tokens<V256, uint16_t, 2>;
        r->from_float_fast = to_f16;
    }
    if (TypeTraits* r = find_row(rows, n, DType::BF16))
        r->vec_dot = dot<uint16_t, load_bf16, bf16_scalar>;
}

}  // namespace syslm::kernels::x86
