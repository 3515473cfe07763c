// AVX2 dequantization (to_float) of the types prefill's GEMM reads: the f32 panels on CPUs
// without AVX-512 are converted from these rows, and the scalar references left the GEMM slower
// than the int8 dots on an AVX2-only AMD EPYC (Zen 3): Q4_0 pp512 453-640 t/s against 704-781.
// Bit-identical to the scalar references: the same float operations in the same order (mul,
// then sub), compiled without FMA contraction (kernels/CMakeLists.txt).
#include <cstdint>

#include "kernels/cpu/x86/quant_helpers.hpp"
#include "kernels/cpu/x86/simd.hpp"
#include "kernels/cpu/x86/x86_kernels.hpp"
#include "kernels/quants/block_layouts.hpp"

namespace syslm::kernels::x86 {
namespace {

// 8 int8 levels (the low 8 bytes of b) as floats.
__m256 widen8(__m128i b) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

// 32 int8 levels to y: elements 0-15 times dl0, 16-31 times dl1, then ml subtracted (WithMin).
template <bool WithMin>
void levels32_to_float(__m256i v, float dl0, float dl1, float ml, float* y) {
    const __m128i half[2] = {_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)};
    const __m256 d[2] = {_mm256_set1_ps(dl0), _mm256_set1_ps(dl1)};
    const __m256 m = _mm256_set1_ps(ml);
    for (int h = 0; h < 2; ++h)
        for (int q = 0; q < 2; ++q) {
            __m256 f = _mm256_mul_ps(d[h], widen8(q ? _mm_srli_si128(half[h], 8) : half[h]));
            if constexpr (WithMin) f = _mm256_sub_ps(f, m);
            _mm256_storeu_ps(y + 16 * h + 8 * q, f);
        }
}

// 16 bytes of nibbles: low nibbles (elements 0-15) and high nibbles (16-31) less 8, times d.
void q4_0_to_float(const uint8_t* qs, float d, float* y) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    const __m256i v = _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
    levels32_to_float<false>(v, d, d, 0.0f, y);
}

void dequant_q4_0(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ4_0*>(src);
    for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) q4_0_to_float(x[i].qs, f16(x[i].d), y);
}

// The load-time layout of Q4_0 (block_layouts.hpp): per block the same arithmetic as
// dequant_q4_0, the scale read from its slot.
void dequant_q4_0_g8(const void* src, float* y, int64_t n) {
    const auto* g = static_cast<const BlockQ4_0G8*>(src);
    for (int64_t i = 0; i < n / (kG8Blocks * QK4_0); ++i)
        for (int b = 0; b < kG8Blocks; ++b, y += QK4_0)
            q4_0_to_float(g[i].qs + 16 * b, f16(g[i].d[kG8Slot[b]]), y);
}

void dequant_q8_0(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ8_0*>(src);
    for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
        const float d = f16(x[i].d);
        levels32_to_float<false>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs)), d,
                                 d, 0.0f, y);
    }
}

// Q4_K / Q5_K: per 32-element group j, (d * sc_j) * level - dmin * m_j; levels of groups 2c and
// 2c + 1 are the low and high nibbles of qs[32c..32c+31], Q5_K's bit 4 is bit j of qh[l]. In
// lane order (Lanes, block_layouts.hpp) the same unpacking gives the level vectors transposed.
template <typename Block, bool HighBit, bool Lanes = false>
void dequant_k4(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const Block*>(src);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
        uint64_t sc8, mn8;
        k4_scales_mins(x[i].scales, sc8, mn8);
        const float d = f16(x[i].d), dmin = f16(x[i].dmin);
        __m256i qh = _mm256_setzero_si256();
        if constexpr (HighBit) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qh));
        __m256i v[8];
        for (int c = 0; c < QK_K / 64; ++c) {
            const __m256i q =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * c));
            v[2 * c] = _mm256_and_si256(q, m4);
            v[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        }
        if constexpr (HighBit)
            for (int j = 0; j < 8; ++j) v[j] = _mm256_or_si256(v[j], bit_to(qh, j, 4));
        if constexpr (Lanes) transpose8x8_epi32(v);
        for (int j = 0; j < 8; ++j) {
            const float dl = d * static_cast<float>((sc8 >> (8 * j)) & 0xFF);
            const float ml = dmin * static_cast<float>((mn8 >> (8 * j)) & 0xFF);
            levels32_to_float<true>(v[j], dl, dl, ml, y + 32 * j);
        }
    }
}

void dequant_q4_k(const void* src, float* y, int64_t n) {
    dequant_k4<BlockQ4_K, false>(src, y, n);
}

void dequant_q5_k(const void* src, float* y, int64_t n) {
    dequant_k4<BlockQ5_K, true>(src, y, n);
}

void dequant_q4_k_lane(const void* src, float* y, int64_t n) {
    dequant_k4<BlockQ4_K, false, true>(src, y, n);
}

void dequant_q5_k_lane(const void* src, float* y, int64_t n) {
    dequant_k4<BlockQ5_K, true, true>(src, y, n);
}

// Q6_K: per half of 128 elements, four runs of 32 levels from ql (low 4 bits) and qh (2 bits
// each), less 32, times d * scale per 16 elements. Lanes: as for dequant_k4.
template <bool Lanes>
void dequant_q6_k_order(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ6_K*>(src);
    const __m256i c32 = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
        const float d = f16(x[i].d);
        __m256i half[2][4], v[8];
        q6_k_levels(x[i], 0, half[0]);
        q6_k_levels(x[i], 1, half[1]);
        for (int j = 0; j < 8; ++j) v[j] = half[j / 4][j % 4];
        if constexpr (Lanes) transpose8x8_epi32(v);
        const int8_t* sc = x[i].scales;
        for (int j = 0; j < 8; ++j)
            levels32_to_float<false>(_mm256_sub_epi8(v[j], c32), d * static_cast<float>(sc[2 * j]),
                                     d * static_cast<float>(sc[2 * j + 1]), 0.0f, y + 32 * j);
    }
}

void dequant_q6_k(const void* src, float* y, int64_t n) {
    dequant_q6_k_order<false>(src, y, n);
}

void dequant_q6_k_lane(const void* src, float* y, int64_t n) {
    dequant_q6_k_order<true>(src, y, n);
}

}  // namespace

void register_dequant_avx2(TypeTraits* rows, int n) {
    const struct {
        DType type;
        ToFloatFn fn;
    } deqs[] = {{DType::Q4_K, dequant_q4_k},           {DType::Q5_K, dequant_q5_k},
                {DType::Q6_K, dequant_q6_k},           {DType::Q8_0, dequant_q8_0},
                {DType::Q4_0, dequant_q4_0},           {DType::Q4_0_G8, dequant_q4_0_g8},
                {DType::Q4_K_LANE, dequant_q4_k_lane}, {DType::Q5_K_LANE, dequant_q5_k_lane},
                {DType::Q6_K_LANE, dequant_q6_k_lane}};
    for (const auto& d : deqs)
        if (TypeTraits* r = find_row(rows, n, d.type)) r->to_float = d.fn;
}

}  // namespace syslm::kernels::x86
