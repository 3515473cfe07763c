// AVX-512 VNNI quantized dot products: the kernels of quant_dot_body.hpp on vpdpbusd (u8 x s8,
// four products into int32, no saturation), at 256-bit width through AVX512VL. Compiled with
// the AVX-512 flags; see kernels/isa.hpp.
//
// Why 256-bit: on Zen 4 (this machine) 512-bit integer ops run as two 256-bit halves, and
// 512-bit Q4_0/Q8_0 kernels (two blocks per zmm, scales of four blocks converted together)
// measured no faster (Q4_0 +2%, Q8_0 -10%, one thread, 64 MB matrix). A CPU with full-width
// AVX-512 units may gain from them; that is a measurement to make there.
#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

constexpr bool kScaleAfterSum = true;

__m256i dot4(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

__m256i dot4_sub(__m256i u, __m256i c, __m256i s) {
    return _mm256_sub_epi32(dot4(u, s), dot4(c, s));
}

__m256i dot8(__m256i u0, __m256i s0, __m256i u1, __m256i s1) {
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u0, s0), u1, s1);
}

__m256i prep_scale(__m256i s) {
    return s;
}

__m256i dot4_scaled(__m256i u, __m256i s, __m256i scale) {
    return _mm256_mullo_epi32(dot4(u, s), scale);
}

__m256i lane_acc(__m256i a, __m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(a, u, s);
}

__m256i lane_scaled(__m256i a, __m128i sc) {
    return _mm256_mullo_epi32(a, _mm256_cvtepi8_epi32(sc));
}

}  // namespace
}  // namespace syslm::kernels::x86

#include "kernels/cpu/x86/quant_dot_body.hpp"

namespace syslm::kernels::x86 {

void register_quant_avx512(TypeTraits* rows, int n) {
    set_quant_dots(rows, n);
}

}  // namespace syslm::kernels::x86
