// AVX2 quantized dot products: the kernels of quant_dot_body.hpp on vpmaddubsw (u8 x s8 pairs
// into int16) + vpmaddwd. Compiled with -mavx2 -mfma -mf16c; see kernels/isa.hpp.
#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

constexpr bool kScaleAfterSum = false;

__m256i dot4(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// The offset is removed in int16 (both pair sums stay far from 2^15), saving one vpmaddwd.
__m256i dot4_sub(__m256i u, __m256i c, __m256i s) {
    const __m256i d = _mm256_sub_epi16(_mm256_maddubs_epi16(u, s), _mm256_maddubs_epi16(c, s));
    return _mm256_madd_epi16(d, _mm256_set1_epi16(1));
}

// Both int16 pair sums stay under 2 * 2 * 63 * 127 < 2^15, so they add before one vpmaddwd.
__m256i dot8(__m256i u0, __m256i s0, __m256i u1, __m256i s1) {
    const __m256i d = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
    return _mm256_madd_epi16(d, _mm256_set1_epi16(1));
}

// The scale multiplies the int16 pair sums inside vpmaddwd: each int32 lane holds it twice.
__m256i prep_scale(__m256i s) {
    return _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)),
                           _mm256_slli_epi32(s, 16));
}

__m256i dot4_scaled(__m256i u, __m256i s, __m256i scale) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale);
}

// Pair sums in int16: the caller bounds how many add up (quant_dot_body.hpp).
__m256i lane_acc(__m256i a, __m256i u, __m256i s) {
    return _mm256_add_epi16(a, _mm256_maddubs_epi16(u, s));
}

// Each scale twice (both int16 halves of its lane) for vpmaddwd.
__m256i lane_scaled(__m256i a, __m128i sc) {
    return _mm256_madd_epi16(a, _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sc, sc)));
}

}  // namespace
}  // namespace syslm::kernels::x86

#include "kernels/cpu/x86/quant_dot_body.hpp"

namespace syslm::kernels::x86 {

void register_quant_avx2(TypeTraits* rows, int n) {
    set_quant_dots(rows, n);
}

}  // namespace syslm::kernels::x86
