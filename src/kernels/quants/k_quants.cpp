// K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and their dot-product partner Q8_K, in 256-element
// super-blocks (layouts in block_layouts.hpp). Quantizers reproduce ggml's quantize_row_*_ref
// bit for bit, and with an importance vector ggml's quantize_row_*_impl (scale searches in
// k_quant_search.cpp); dequantizers produce the same floats as ggml's dequantize_row_* (same
// products in the same order).
//
// Dequantization and the dot products share one unpacking step per super-block — levels into an
// int8 array of 256, scales into small arrays — so the bit layout is decoded in one place.
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/quants/block_layouts.hpp"
#include "kernels/quants/k_quant_search.hpp"
#include "kernels/quants/quant_rows.hpp"
#include "kernels/quants/rounding.hpp"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

namespace syslm::kernels {
namespace {

using detail::nearest_int;

int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// ---- bit packing shared by several types --------------------------------------------------------

// 2-bit planes: in each 128-element half, byte l of its 32 bytes holds elements l, l+32, l+64,
// l+96 at bit offsets 0, 2, 4, 6.
void pack_2bit_planes(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                 (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void unpack_2bit_planes(const uint8_t* qs, int8_t* q) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            for (int p = 0; p < 4; ++p)
                q[j + 32 * p + l] = static_cast<int8_t>((qs[j / 4 + l] >> (2 * p)) & 3);
}

// Q4_K/Q5_K scales: 8 six-bit scales and 8 six-bit mins in 12 bytes. Sub-blocks 0..3 keep their
// values in the low 6 bits of bytes 0..3 (scale) and 4..7 (min); sub-blocks 4..7 keep the low 4
// bits in the nibbles of bytes 8..11 and the top 2 bits in the spare top bits of bytes 0..7.
void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
    for (int j = 0; j < 4; ++j) {
        q[j] = ls[j];
        q[j + 4] = lm[j];
    }
    for (int j = 4; j < 8; ++j) {
        q[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
        q[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
        q[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
}

// Q3_K: 16 six-bit scales (stored +32) in 12 bytes; see block_layouts.hpp.
void unpack_q3_k_scales(const uint8_t* s, int* sc) {
    for (int j = 0; j < 16; ++j) {
        const int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
        const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (low | (high << 4)) - 32;
    }
}

// ---- per-type level unpacking (levels as the dequantization formula uses them)
// --------------------

// Q2_K levels in [0, 3].
void unpack_q2_k(const BlockQ2_K& b, int8_t* q) {
    unpack_2bit_planes(b.qs, q);
}

// Q3_K levels in [-4, 3]: low 2 bits from the planes, minus 4 unless the hmask bit is set.
void unpack_q3_k(const BlockQ3_K& b, int8_t* q) {
    unpack_2bit_planes(b.qs, q);
    for (int k = 0; k < QK_K; ++k) {
        const bool high = (b.hmask[k % 32] >> (k / 32)) & 1;
        q[k] = static_cast<int8_t>(q[k] - (high ? 0 : 4));
    }
}

// Q4_K levels in [0, 15].
void unpack_q4_k(const BlockQ4_K& b, int8_t* q) {
    for (int c = 0; c < QK_K / 64; ++c)
        for (int l = 0; l < 32; ++l) {
            q[64 * c + l] = static_cast<int8_t>(b.qs[32 * c + l] & 0xF);
            q[64 * c + 32 + l] = static_cast<int8_t>(b.qs[32 * c + l] >> 4);
        }
}

// Q5_K levels in [0, 31]: bit 4 of element 32*s + l is bit s of qh[l].
void unpack_q5_k(const BlockQ5_K& b, int8_t* q) {
    for (int c = 0; c < QK_K / 64; ++c)
        for (int l = 0; l < 32; ++l) {
            const int h0 = ((b.qh[l] >> (2 * c)) & 1) << 4;
            const int h1 = ((b.qh[l] >> (2 * c + 1)) & 1) << 4;
            q[64 * c + l] = static_cast<int8_t>((b.qs[32 * c + l] & 0xF) | h0);
            q[64 * c + 32 + l] = static_cast<int8_t>((b.qs[32 * c + l] >> 4) | h1);
        }
}

// Q6_K levels in [-32, 31].
void unpack_q6_k(const BlockQ6_K& b, int8_t* q) {
    for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b.ql + 64 * half;
        const uint8_t* qh = b.qh + 32 * half;
        int8_t* out = q + 128 * half;
        for (int l = 0; l < 32; ++l) {
            out[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            out[l + 32] =
                static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

// Integer dot product of n levels with n Q8_K quants.
int dot_i8(const int8_t* a, const int8_t* b, int n) {
    int s = 0;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

}  // namespace

// ---- Q2_K ---------------------------------------------------------------------------------------

namespace {

// ggml's quantize_row_q2_K_ref: sub-block fits weighted by |x|, 4-bit scales and mins relative
// to the largest of each. With qw, each fit weight is also multiplied by its column's importance
// (syslm's second weighted search; qw = nullptr is ggml's reference exactly).
void q2_k_scales_ref(const float* x, BlockQ2_K& y, uint8_t* L, const float* qw = nullptr) {
    uint8_t Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    // Scales and mins are positive (the min is subtracted), so the largest sets the range.
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
        for (int l = 0; l < 16; ++l)
            weights[l] = std::fabs(x[16 * j + l]) * (qw ? qw[16 * j + l] : 1.0f);
        scales[j] = detail::make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                             -0.5f, 0.1f, 15, true);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        const float iscale = q4scale / max_scale;
        for (int j = 0; j < QK_K / 16; ++j)
            y.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
        y.d = f32_to_f16(max_scale / q4scale);
    } else {
        for (int j = 0; j < QK_K / 16; ++j) y.scales[j] = 0;
        y.d = f32_to_f16(0.f);
    }
    if (max_min > 0) {
        const float iscale = q4scale / max_min;
        for (int j = 0; j < QK_K / 16; ++j) {
            const int l = nearest_int(iscale * mins[j]);
            y.scales[j] = static_cast<uint8_t>(y.scales[j] | (l << 4));
        }
        y.dmin = f32_to_f16(max_min / q4scale);
    } else {
        y.dmin = f32_to_f16(0.f);
    }
}

// ggml's quantize_row_q2_K_impl: sub-block fits weighted by importance * sqrt(sigma^2 + x^2),
// scales and mins fitted by make_qp_quants weighted by each sub-block's total weight.
void q2_k_scales_imatrix(const float* x, const float* qw, BlockQ2_K& y, uint8_t* L) {
    uint8_t Laux[16], Ls[QK_K / 16], Lm[QK_K / 16];
    float weight[16], mins[QK_K / 16], scales[QK_K / 16], sw[QK_K / 16];
    float sumx2 = 0;
    for (int j = 0; j < QK_K; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = sumx2 / QK_K;
    for (int j = 0; j < QK_K / 16; ++j) {
        sw[j] = 0;
        for (int l = 0; l < 16; ++l)
            weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
        for (int l = 0; l < 16; ++l) sw[j] += weight[l];
        scales[j] = detail::make_qkx2_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux,
                                             -0.9f, 0.05f, 36, false);
    }
    const float dm = detail::make_qp_quants(QK_K / 16, 15, scales, Ls, sw);
    const float mm = detail::make_qp_quants(QK_K / 16, 15, mins, Lm, sw);
    y.d = f32_to_f16(dm);
    y.dmin = f32_to_f16(mm);
    for (int j = 0; j < QK_K / 16; ++j) y.scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
}

// qw: llama.cpp's weighted search (ref_search false) or the reference search with
// importance-weighted fits (true).
void quantize_q2_k(const float* x, void* dst, int64_t n, const float* qw, bool ref_search = false) {
    auto* y = static_cast<BlockQ2_K*>(dst);
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        if (qw && !ref_search)
            q2_k_scales_imatrix(x, qw + QK_K * i, y[i], L);
        else
            q2_k_scales_ref(x, y[i], L, qw ? qw + QK_K * i : nullptr);
        // Re-pick the levels against the scales as they will be decoded.
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = f16_to_f32(y[i].d) * static_cast<float>(y[i].scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = f16_to_f32(y[i].dmin) * static_cast<float>(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = static_cast<uint8_t>(clamp_int(l, 0, 3));
            }
        }
        pack_2bit_planes(L, y[i].qs);
    }
}

}  // namespace

void quantize_row_q2_k(const float* x, void* dst, int64_t n) {
    quantize_q2_k(x, dst, n, nullptr);
}

void quantize_row_q2_k_imatrix(const float* x, void* dst, int64_t n, const float* importance) {
    quantize_q2_k(x, dst, n, importance);
}

void quantize_row_q2_k_imatrix_ref_search(const float* x, void* dst, int64_t n,
                                          const float* importance) {
    quantize_q2_k(x, dst, n, importance, /*ref_search=*/true);
}

void dequantize_row_q2_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ2_K*>(src);
    int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = f16_to_f32(x[i].d);
        const float dmin = f16_to_f32(x[i].dmin);
        unpack_q2_k(x[i], q);
        for (int s = 0; s < QK_K / 16; ++s) {
            const float dl = d * static_cast<float>(x[i].scales[s] & 0xF);
            const float ml = dmin * static_cast<float>(x[i].scales[s] >> 4);
            for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>(q[16 * s + l]) - ml;
        }
    }
}

float vec_dot_q2_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ2_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    int8_t q[QK_K];
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q2_k(x[i], q);
        int64_t scaled = 0, mins = 0;
        for (int s = 0; s < QK_K / 16; ++s) {
            scaled += (x[i].scales[s] & 0xF) * dot_i8(q + 16 * s, y[i].qs + 16 * s, 16);
            mins += (x[i].scales[s] >> 4) * y[i].bsums[s];
        }
        sum += static_cast<double>(y[i].d) *
               (static_cast<double>(f16_to_f32(x[i].d)) * static_cast<double>(scaled) -
                static_cast<double>(f16_to_f32(x[i].dmin)) * static_cast<double>(mins));
    }
    return static_cast<float>(sum);
}

// ---- Q3_K ---------------------------------------------------------------------------------------

namespace {

// The 16 six-bit scales (stored +32, l6 in [0, 64)) into Q3_K's 12 bytes.
void pack_q3_k_scales(const int* l6, uint8_t* scales) {
    std::memset(scales, 0, 12);
    for (int j = 0; j < QK_K / 16; ++j) {
        int l = l6[j];
        if (j < 8)
            scales[j] = static_cast<uint8_t>(l & 0xF);
        else
            scales[j - 8] = static_cast<uint8_t>(scales[j - 8] | ((l & 0xF) << 4));
        l >>= 4;
        scales[j % 4 + 8] = static_cast<uint8_t>(scales[j % 4 + 8] | (l << (2 * (j / 4))));
    }
}

// ggml's quantize_row_q3_K_ref: x^2-weighted level moves, scales relative to the largest.
void q3_k_scales_ref(const float* x, BlockQ3_K& y, int8_t* L) {
    float scales[QK_K / 16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
        scales[j] = detail::make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
        const float scale = std::fabs(scales[j]);
        if (scale > amax) {
            amax = scale;
            max_scale = scales[j];
        }
    }
    int l6[QK_K / 16] = {};
    if (max_scale != 0.0f) {
        const float iscale = -32.f / max_scale;
        for (int j = 0; j < QK_K / 16; ++j) {
            const int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
            l6[j] = clamp_int(l, -32, 31) + 32;
        }
        pack_q3_k_scales(l6, y.scales);
        y.d = f32_to_f16(1 / iscale);
    } else {
        std::memset(y.scales, 0, sizeof y.scales);
        y.d = f32_to_f16(0.f);
    }
}

// ggml's quantize_row_q3_K_impl with an importance vector: weighted make_qx_quants for the
// levels and for the scales (weighted by each sub-block's total weight).
void q3_k_scales_imatrix(const float* x, const float* qw, BlockQ3_K& y, int8_t* L) {
    float scales[QK_K / 16], weight[16], sw[QK_K / 16];
    int8_t Ls[QK_K / 16];
    float sumx2 = 0;
    for (int j = 0; j < QK_K; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = 2 * sumx2 / QK_K;
    for (int j = 0; j < QK_K / 16; ++j) {
        for (int l = 0; l < 16; ++l)
            weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
        float sumw = 0;
        for (int l = 0; l < 16; ++l) sumw += weight[l];
        sw[j] = sumw;
        scales[j] = detail::make_qx_quants(16, 4, x + 16 * j, L + 16 * j, weight);
    }
    const float d_block = detail::make_qx_quants(QK_K / 16, 32, scales, Ls, sw);
    int l6[QK_K / 16];
    for (int j = 0; j < QK_K / 16; ++j) l6[j] = Ls[j];
    pack_q3_k_scales(l6, y.scales);
    y.d = f32_to_f16(d_block);
}

void quantize_q3_k(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ3_K*>(dst);
    int8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        if (qw)
            q3_k_scales_imatrix(x, qw + QK_K * i, y[i], L);
        else
            q3_k_scales_ref(x, y[i], L);
        int sc[16];
        unpack_q3_k_scales(y[i].scales, sc);
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = f16_to_f32(y[i].d) * static_cast<float>(sc[j]);
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = static_cast<int8_t>(clamp_int(l, -4, 3) + 4);
            }
        }
        // Level bit 2 goes to hmask: element k sets bit k/32 of hmask[k%32].
        std::memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t low[QK_K];
        for (int k = 0; k < QK_K; ++k) {
            int l = L[k];
            if (l > 3) {
                y[i].hmask[k % 32] = static_cast<uint8_t>(y[i].hmask[k % 32] | (1 << (k / 32)));
                l -= 4;
            }
            low[k] = static_cast<uint8_t>(l);
        }
        pack_2bit_planes(low, y[i].qs);
    }
}

}  // namespace

void quantize_row_q3_k(const float* x, void* dst, int64_t n) {
    quantize_q3_k(x, dst, n, nullptr);
}

void quantize_row_q3_k_imatrix(const float* x, void* dst, int64_t n, const float* importance) {
    quantize_q3_k(x, dst, n, importance);
}

void dequantize_row_q3_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ3_K*>(src);
    int8_t q[QK_K];
    int sc[16];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = f16_to_f32(x[i].d);
        unpack_q3_k(x[i], q);
        unpack_q3_k_scales(x[i].scales, sc);
        for (int s = 0; s < QK_K / 16; ++s) {
            const float dl = d * static_cast<float>(sc[s]);
            for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>(q[16 * s + l]);
        }
    }
}

float vec_dot_q3_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ3_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    int8_t q[QK_K];
    int sc[16];
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q3_k(x[i], q);
        unpack_q3_k_scales(x[i].scales, sc);
        int64_t scaled = 0;
        for (int s = 0; s < QK_K / 16; ++s)
            scaled += sc[s] * dot_i8(q + 16 * s, y[i].qs + 16 * s, 16);
        sum += static_cast<double>(y[i].d) * static_cast<double>(f16_to_f32(x[i].d)) *
               static_cast<double>(scaled);
    }
    return static_cast<float>(sum);
}

// ---- Q4_K and Q5_K (same scale scheme, 4 or 5 bit levels) --------------------------------------

namespace {

// Q4_K/Q5_K: eight 32-element sub-blocks with a 6-bit scale and min each, in units of the super-
// block's f16 d and dmin; levels re-picked against the decoded scales at the end.
// Without an importance vector (ggml's quantize_row_q4_K_ref): a weighted asymmetric fit per
// sub-block (weights favour large values: rms of the sub-block + |x|), scales and mins relative
// to the largest of each. With one (ggml's quantize_row_q4_K_impl): weights importance *
// sqrt(sigma^2 + x^2), a finer search, and scales and mins fitted by make_qp_quants weighted by
// each sub-block's total weight.
void quantize_k4_scales(const float* x, const float* qw, int nmax, float rmin, int nstep,
                        uint16_t& d_out, uint16_t& dmin_out, uint8_t* packed_scales, uint8_t* L) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    uint8_t ls[QK_K / 32], lm[QK_K / 32];
    if (qw) {
        float sw[QK_K / 32];
        float sum_x2 = 0;
        for (int l = 0; l < QK_K; ++l) sum_x2 += x[l] * x[l];
        const float sigma2 = 2 * sum_x2 / QK_K;
        for (int j = 0; j < QK_K / 32; ++j) {
            for (int l = 0; l < 32; ++l)
                weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 32; ++l) sumw += weights[l];
            sw[j] = sumw;
            scales[j] = detail::make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j,
                                                 &mins[j], Laux, -0.9f, 0.05f, 36, false);
        }
        const float d_block = detail::make_qp_quants(QK_K / 32, 63, scales, ls, sw);
        const float m_block = detail::make_qp_quants(QK_K / 32, 63, mins, lm, sw);
        d_out = f32_to_f16(d_block);
        dmin_out = f32_to_f16(m_block);
    } else {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 32; ++j) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
            const float av_x = std::sqrt(sum_x2 / 32);
            for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
            scales[j] = detail::make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j,
                                                 &mins[j], Laux, rmin, 0.1f, nstep, false);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < QK_K / 32; ++j) {
            // ggml stores nearest_int into a uint8_t before clamping: keep that wrap-around.
            const auto s = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
            const auto m = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
            ls[j] = s < 63 ? s : 63;
            lm[j] = m < 63 ? m : 63;
        }
        d_out = f32_to_f16(max_scale / 63.f);
        dmin_out = f32_to_f16(max_min / 63.f);
    }
    pack_scale_min_k4(ls, lm, packed_scales);

    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        unpack_scale_min_k4(j, packed_scales, sc, m);
        const float d = f16_to_f32(d_out) * static_cast<float>(sc);
        if (d == 0.0f) continue;
        const float dm = f16_to_f32(dmin_out) * static_cast<float>(m);
        for (int ii = 0; ii < 32; ++ii) {
            const int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = static_cast<uint8_t>(clamp_int(l, 0, nmax));
        }
    }
}

// Dequantization shared by Q4_K and Q5_K once the levels are unpacked.
void dequantize_k4(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const int8_t* q,
                   float* y) {
    const float d = f16_to_f32(d16);
    const float dmin = f16_to_f32(dmin16);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        unpack_scale_min_k4(j, scales, sc, m);
        const float dl = d * static_cast<float>(sc);
        const float ml = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) y[32 * j + l] = dl * static_cast<float>(q[32 * j + l]) - ml;
    }
}

double dot_k4(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const int8_t* q,
              const BlockQ8_K& y) {
    int64_t scaled = 0, mins = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        unpack_scale_min_k4(j, scales, sc, m);
        scaled += sc * dot_i8(q + 32 * j, y.qs + 32 * j, 32);
        mins += m * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
    }
    return static_cast<double>(y.d) *
           (static_cast<double>(f16_to_f32(d16)) * static_cast<double>(scaled) -
            static_cast<double>(f16_to_f32(dmin16)) * static_cast<double>(mins));
}

}  // namespace

namespace {

void quantize_q4_k(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ4_K*>(dst);
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        quantize_k4_scales(x, qw ? qw + QK_K * i : nullptr, 15, -1.f, 20, y[i].d, y[i].dmin,
                           y[i].scales, L);
        for (int c = 0; c < QK_K / 64; ++c)
            for (int l = 0; l < 32; ++l)
                y[i].qs[32 * c + l] =
                    static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

}  // namespace

void quantize_row_q4_k(const float* x, void* dst, int64_t n) {
    quantize_q4_k(x, dst, n, nullptr);
}

void quantize_row_q4_k_imatrix(const float* x, void* dst, int64_t n, const float* importance) {
    quantize_q4_k(x, dst, n, importance);
}

void dequantize_row_q4_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ4_K*>(src);
    int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
        unpack_q4_k(x[i], q);
        dequantize_k4(x[i].d, x[i].dmin, x[i].scales, q, y);
    }
}

float vec_dot_q4_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ4_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    int8_t q[QK_K];
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q4_k(x[i], q);
        sum += dot_k4(x[i].d, x[i].dmin, x[i].scales, q, y[i]);
    }
    return static_cast<float>(sum);
}

namespace {

void quantize_q5_k(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ5_K*>(dst);
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        quantize_k4_scales(x, qw ? qw + QK_K * i : nullptr, 31, -0.5f, 15, y[i].d, y[i].dmin,
                           y[i].scales, L);
        std::memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < QK_K / 64; ++c) {
            for (int l = 0; l < 32; ++l) {
                int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                if (l1 > 15) {
                    l1 -= 16;
                    y[i].qh[l] = static_cast<uint8_t>(y[i].qh[l] | (1 << (2 * c)));
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y[i].qh[l] = static_cast<uint8_t>(y[i].qh[l] | (1 << (2 * c + 1)));
                }
                y[i].qs[32 * c + l] = static_cast<uint8_t>(l1 | (l2 << 4));
            }
        }
    }
}

}  // namespace

void quantize_row_q5_k(const float* x, void* dst, int64_t n) {
    quantize_q5_k(x, dst, n, nullptr);
}

void quantize_row_q5_k_imatrix(const float* x, void* dst, int64_t n, const float* importance) {
    quantize_q5_k(x, dst, n, importance);
}

void dequantize_row_q5_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ5_K*>(src);
    int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
        unpack_q5_k(x[i], q);
        dequantize_k4(x[i].d, x[i].dmin, x[i].scales, q, y);
    }
}

float vec_dot_q5_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ5_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    int8_t q[QK_K];
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q5_k(x[i], q);
        sum += dot_k4(x[i].d, x[i].dmin, x[i].scales, q, y[i]);
    }
    return static_cast<float>(sum);
}

// ---- Q6_K ---------------------------------------------------------------------------------------

namespace {

// With an importance vector (ggml's quantize_row_q6_K_impl) it weights the level search
// directly; the rest is the reference quantizer.
void quantize_q6_k(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ6_K*>(dst);
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            scales[ib] = detail::make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib,
                                                qw ? qw + QK_K * i + 16 * ib : nullptr);
            const float abs_scale = std::fabs(scales[ib]);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < 1e-15f) {  // all (near) zero: ggml writes an all-zero block
            std::memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = f32_to_f16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const int s = nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = static_cast<int8_t>(s < 127 ? s : 127);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = f16_to_f32(y[i].d) * static_cast<float>(y[i].scales[j]);
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = static_cast<int8_t>(clamp_int(l, -32, 31) + 32);
            }
        }
        for (int half = 0; half < 2; ++half) {
            const int8_t* Lh = L + 128 * half;
            uint8_t* ql = y[i].ql + 64 * half;
            uint8_t* qh = y[i].qh + 32 * half;
            for (int l = 0; l < 32; ++l) {
                const int q1 = Lh[l] & 0xF, q2 = Lh[l + 32] & 0xF;
                const int q3 = Lh[l + 64] & 0xF, q4 = Lh[l + 96] & 0xF;
                ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
                ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
                qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                             ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

}  // namespace

void quantize_row_q6_k(const float* x, void* dst, int64_t n) {
    quantize_q6_k(x, dst, n, nullptr);
}

void quantize_row_q6_k_imatrix(const float* x, void* dst, int64_t n, const float* importance) {
    quantize_q6_k(x, dst, n, importance);
}

void dequantize_row_q6_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ6_K*>(src);
    int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = f16_to_f32(x[i].d);
        unpack_q6_k(x[i], q);
        for (int s = 0; s < QK_K / 16; ++s) {
            const float dl = d * static_cast<float>(x[i].scales[s]);
            for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>(q[16 * s + l]);
        }
    }
}

float vec_dot_q6_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ6_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    int8_t q[QK_K];
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q6_k(x[i], q);
        int64_t scaled = 0;
        for (int s = 0; s < QK_K / 16; ++s)
            scaled += x[i].scales[s] * dot_i8(q + 16 * s, y[i].qs + 16 * s, 16);
        sum += static_cast<double>(y[i].d) * static_cast<double>(f16_to_f32(x[i].d)) *
               static_cast<double>(scaled);
    }
    return static_cast<float>(sum);
}

// ---- Q8_K (activations for the K-quant dot products) --------------------------------------------

void quantize_row_q8_k(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = std::fabs(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            std::memset(&y[i], 0,
                        sizeof y[i]);  // ggml leaves bsums unset here; zero is their value
            continue;
        }
        // -127 (not -128) keeps every quant in [-127, 127], as ggml does.
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) {
            const int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = static_cast<int8_t>(clamp_int(v, -128, 127));
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[16 * j + ii];
            y[i].bsums[j] = static_cast<int16_t>(sum);
        }
        y[i].d = 1 / iscale;
    }
}

void dequantize_row_q8_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ8_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i)
        for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * static_cast<float>(x[i].qs[j]);
}

float vec_dot_q8_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ8_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i)
        sum += static_cast<double>(x[i].d) * static_cast<double>(y[i].d) *
               static_cast<double>(dot_i8(x[i].qs, y[i].qs, QK_K));
    return static_cast<float>(sum);
}

}  // namespace syslm::kernels
