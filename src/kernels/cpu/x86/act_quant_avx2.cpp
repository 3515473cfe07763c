// AVX2 activation quantizers (TypeTraits::from_float_fast) for the dot-product partners Q8_0,
// Q8_1, Q8_K and Q8_0_G8. Compiled with -mavx2 -mfma -mf16c; see kernels/isa.hpp. The AVX-512 tier keeps
// these: quantizing one activation row costs little next to reading the weight matrix.
//
// Contract: bit-identical to the reference quantizers (from_float) for every input without NaN,
// ±Inf included — the same float operations in the same order (the scale is a true division,
// not a reciprocal estimate), the references' rounding modes reproduced exactly (C's roundf,
// half away from zero, for Q8_0/Q8_1; ties-to-even for Q8_K), and f16 scales converted with
// round-to-nearest-even as core/half.hpp does. Inputs with NaN give some valid block.
#include <cstring>

#include "kernels/cpu/x86/quant_helpers.hpp"
#include "kernels/cpu/x86/simd.hpp"

#include "kernels/cpu/x86/x86_kernels.hpp"
#include "kernels/quants/block_layouts.hpp"

namespace syslm::kernels::x86 {
namespace {

__m256 abs_ps(__m256 v) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

// NaN lanes (0 * Inf when the block holds an infinity) become 0, as the references give.
__m256 zero_nan(__m256 v) {
    return _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
}

// C's roundf (half away from zero), clamped to [-127, 127], as an int32. v - trunc(v) is exact.
__m256i round_away_i8(__m256 v) {
    v = zero_nan(v);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 half_or_more =
        _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 step = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
    __m256 r = _mm256_add_ps(t, _mm256_and_ps(half_or_more, step));
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    return _mm256_cvttps_epi32(r);
}

// Round to nearest, ties to even (ggml's nearest_int), independent of MXCSR.
__m256i round_even_i32(__m256 v) {
    return _mm256_cvttps_epi32(
        _mm256_round_ps(zero_nan(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 32 int32 (four vectors, in order) -> 32 int8 with signed saturation, in order.
void store_i8x32(__m256i a0, __m256i a1, __m256i a2, __m256i a3, int8_t* dst) {
    // The packs interleave 128-bit lanes; the permute puts the 4-byte groups back in order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
    const __m256i q = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), q);
}

// One 32-element Q8_0/Q8_1 block: the f16 scale, the quants, and the sum of the quants.
int quantize_block32(const float* x, uint16_t& d16, int8_t* qs, float& d_out) {
    const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    const __m256 m =
        _mm256_max_ps(_mm256_max_ps(abs_ps(v0), abs_ps(v1)), _mm256_max_ps(abs_ps(v2), abs_ps(v3)));
    const float amax = hmax_ps(m);
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    d16 = static_cast<uint16_t>(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    const __m256 vid = _mm256_set1_ps(id);
    const __m256i a0 = round_away_i8(_mm256_mul_ps(v0, vid));
    const __m256i a1 = round_away_i8(_mm256_mul_ps(v1, vid));
    const __m256i a2 = round_away_i8(_mm256_mul_ps(v2, vid));
    const __m256i a3 = round_away_i8(_mm256_mul_ps(v3, vid));
    store_i8x32(a0, a1, a2, a3, qs);
    d_out = d;
    return hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)));
}

void quantize_q8_0_fast(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ8_0*>(dst);
    float d;
    for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) quantize_block32(x, y[i].d, y[i].qs, d);
}

void quantize_q8_1_fast(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ8_1*>(dst);
    for (int64_t i = 0; i < n / QK8_1; ++i, x += QK8_1) {
        float d;
        const int sum = quantize_block32(x, y[i].d, y[i].qs, d);
        y[i].s = static_cast<uint16_t>(
            _cvtss_sh(static_cast<float>(sum) * d, _MM_FROUND_TO_NEAREST_INT));
    }
}

// Q8_0_G8 (block_layouts.hpp): the blocks of Q8_0, their sums and widened scales moved into
// the group layout.
void quantize_q8_0_g8_fast(const float* x, void* dst, int64_t n) {
    auto* g = static_cast<BlockQ8_0G8*>(dst);
    for (int64_t i = 0; i < n / (kG8Blocks * QK8_0); ++i) {
        for (int b = 0; b < kG8Blocks; ++b, x += QK8_0) {
            alignas(32) int8_t qs[QK8_0];
            uint16_t d16;
            float d;
            const int slot = kG8Slot[b];
            g[i].s[slot] = quantize_block32(x, d16, qs, d);
            g[i].d[slot] = _cvtsh_ss(d16);
            int8_t* pair = g[i].qs + (b / 2) * 64 + (b % 2) * 16;
            std::memcpy(pair, qs, 16);
            std::memcpy(pair + 32, qs + 16, 16);
        }
    }
}

// Q8_K: the scale comes from the signed element of largest magnitude (the first one on ties).
void quantize_q8_k_fast(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + j)));
        const float amax = hmax_ps(m);
        if (amax == 0.0f) {
            std::memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float max = 0;
        for (int j = 0; j < QK_K; j += 8) {
            const int hit = _mm256_movemask_ps(
                _mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + j)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (hit) {
                max = x[j + __builtin_ctz(static_cast<unsigned>(hit))];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i a[4];
            for (int k = 0; k < 4; ++k)
                a[k] = round_even_i32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * k)));
            store_i8x32(a[0], a[1], a[2], a[3], y[i].qs + j);
            y[i].bsums[j / 16] = static_cast<int16_t>(hsum_epi32(_mm256_add_epi32(a[0], a[1])));
            y[i].bsums[j / 16 + 1] = static_cast<int16_t>(hsum_epi32(_mm256_add_epi32(a[2], a[3])));
        }
        y[i].d = 1 / iscale;
    }
}

// Q8_K_LANE: Q8_K's blocks with their quants transposed into lane order (block_layouts.hpp).
void quantize_q8_k_lane_fast(const float* x, void* dst, int64_t n) {
    quantize_q8_k_fast(x, dst, n);
    auto* y = static_cast<BlockQ8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        auto* q = reinterpret_cast<__m256i*>(y[i].qs);
        __m256i v[8];
        for (int k = 0; k < 8; ++k) v[k] = _mm256_loadu_si256(q + k);
        transpose8x8_epi32(v);
        for (int k = 0; k < 8; ++k) _mm256_storeu_si256(q + k, v[k]);
    }
}

}  // namespace

void register_act_quant_avx2(TypeTraits* rows, int n) {
    if (TypeTraits* r = find_row(rows, n, DType::Q8_0)) r->from_float_fast = quantize_q8_0_fast;
    if (TypeTraits* r = find_row(rows, n, DType::Q8_1)) r->from_float_fast = quantize_q8_1_fast;
    if (TypeTraits* r = find_row(rows, n, DType::Q8_K)) r->from_float_fast = quantize_q8_k_fast;
    if (TypeTraits* r = find_row(rows, n, DType::Q8_0_G8))
        r->from_float_fast = quantize_q8_0_g8_fast;
    if (TypeTraits* r = find_row(rows, n, DType::Q8_K_LANE))
        r->from_float_fast = quantize_q8_k_lane_fast;
}

}  // namespace syslm::kernels::x86
