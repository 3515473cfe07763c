// Legacy 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 (layouts in
// block_layouts.hpp). Quantizers follow ggml's quantize_row_*_ref operation for operation — the
// same float expressions in the same order — so the blocks are bit-identical to llama.cpp's.
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/quants/block_layouts.hpp"
#include "kernels/quants/k_quant_search.hpp"
#include "kernels/quants/quant_rows.hpp"
#include "kernels/quants/rounding.hpp"

namespace syslm::kernels {
namespace {

using detail::round_to_i8;
using detail::trunc_clamped;

uint32_t load_qh(const uint8_t* qh) {
    uint32_t v;
    std::memcpy(&v, qh, sizeof v);
    return v;
}

void store_qh(uint8_t* qh, uint32_t v) {
    std::memcpy(qh, &v, sizeof v);
}

// The element of largest magnitude, with its sign (the first one on ties), as ggml's symmetric
// quantizers pick it: the scale is chosen so that this element maps exactly to the end of the
// range.
float signed_absmax(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; ++j) {
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return max;
}

void min_max(const float* x, int n, float& min, float& max) {
    min = 3.402823466e+38f;
    max = -3.402823466e+38f;
    for (int j = 0; j < n; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
}

// Sum of the int8 quants of a Q8 block: the partner's contribution to the min term of Q4_1/Q5_1.
// Computed from qs rather than taken from Q8_1's f16 `s`, whose rounding would otherwise leak
// into the reference result.
int sum_i8(const int8_t* q, int n) {
    int s = 0;
    for (int j = 0; j < n; ++j) s += q[j];
    return s;
}

}  // namespace

// ---- Q4_0 -------------------------------------------------------------------------------------

void quantize_row_q4_0(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ4_0*>(dst);
    for (int64_t i = 0; i < n / QK4_0; ++i, x += QK4_0) {
        const float d = signed_absmax(x, QK4_0) / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            const int q0 = trunc_clamped(x[j] * id + 8.5f, 0, 15);
            const int q1 = trunc_clamped(x[QK4_0 / 2 + j] * id + 8.5f, 0, 15);
            y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void dequantize_row_q4_0(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ4_0*>(src);
    for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) {
        const float d = f16_to_f32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + QK4_0 / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

float vec_dot_q4_0_q8_0(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ4_0*>(vx);
    const auto* y = static_cast<const BlockQ8_0*>(vy);
    double sum = 0;
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        int sumi = 0;
        for (int j = 0; j < QK4_0 / 2; ++j) {
            sumi += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QK4_0 / 2];
        }
        sum += static_cast<double>(f16_to_f32(x[i].d)) * f16_to_f32(y[i].d) * sumi;
    }
    return static_cast<float>(sum);
}

// ---- Q4_1 -------------------------------------------------------------------------------------

void quantize_row_q4_1(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ4_1*>(dst);
    for (int64_t i = 0; i < n / QK4_1; ++i, x += QK4_1) {
        float min, max;
        min_max(x, QK4_1, min, max);
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_f16(d);
        y[i].m = f32_to_f16(min);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            const int q0 = trunc_clamped((x[j] - min) * id + 0.5f, 0, 15);
            const int q1 = trunc_clamped((x[QK4_1 / 2 + j] - min) * id + 0.5f, 0, 15);
            y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void dequantize_row_q4_1(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ4_1*>(src);
    for (int64_t i = 0; i < n / QK4_1; ++i, y += QK4_1) {
        const float d = f16_to_f32(x[i].d);
        const float m = f16_to_f32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
            y[j + QK4_1 / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
        }
    }
}

float vec_dot_q4_1_q8_1(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ4_1*>(vx);
    const auto* y = static_cast<const BlockQ8_1*>(vy);
    double sum = 0;
    for (int64_t i = 0; i < n / QK4_1; ++i) {
        int sumi = 0;
        for (int j = 0; j < QK4_1 / 2; ++j) {
            sumi += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + QK4_1 / 2];
        }
        const double dy = f16_to_f32(y[i].d);
        sum += static_cast<double>(f16_to_f32(x[i].d)) * dy * sumi +
               static_cast<double>(f16_to_f32(x[i].m)) * dy * sum_i8(y[i].qs, QK8_1);
    }
    return static_cast<float>(sum);
}

// ---- Q5_0 -------------------------------------------------------------------------------------

void quantize_row_q5_0(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ5_0*>(dst);
    for (int64_t i = 0; i < n / QK5_0; ++i, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const int q0 = trunc_clamped(x[j] * id + 16.5f, 0, 31);
            const int q1 = trunc_clamped(x[QK5_0 / 2 + j] * id + 16.5f, 0, 31);
            y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= static_cast<uint32_t>(q0 >> 4) << j;
            qh |= static_cast<uint32_t>(q1 >> 4) << (j + QK5_0 / 2);
        }
        store_qh(y[i].qh, qh);
    }
}

void dequantize_row_q5_0(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ5_0*>(src);
    for (int64_t i = 0; i < n / QK5_0; ++i, y += QK5_0) {
        const float d = f16_to_f32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1) << 4;
            const int h1 = static_cast<int>((qh >> (j + QK5_0 / 2)) & 1) << 4;
            y[j] = static_cast<float>(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
            y[j + QK5_0 / 2] = static_cast<float>(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

float vec_dot_q5_0_q8_0(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ5_0*>(vx);
    const auto* y = static_cast<const BlockQ8_0*>(vy);
    double sum = 0;
    for (int64_t i = 0; i < n / QK5_0; ++i) {
        const uint32_t qh = load_qh(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1) << 4;
            const int h1 = static_cast<int>((qh >> (j + QK5_0 / 2)) & 1) << 4;
            sumi += (((x[i].qs[j] & 0x0F) | h0) - 16) * y[i].qs[j];
            sumi += (((x[i].qs[j] >> 4) | h1) - 16) * y[i].qs[j + QK5_0 / 2];
        }
        sum += static_cast<double>(f16_to_f32(x[i].d)) * f16_to_f32(y[i].d) * sumi;
    }
    return static_cast<float>(sum);
}

// ---- Q5_1 -------------------------------------------------------------------------------------

void quantize_row_q5_1(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ5_1*>(dst);
    for (int64_t i = 0; i < n / QK5_1; ++i, x += QK5_1) {
        float min, max;
        min_max(x, QK5_1, min, max);
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_f16(d);
        y[i].m = f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; ++j) {
            // ggml has no MIN(31, ...) here: (x - min) * id never exceeds 31 + rounding.
            const int q0 = trunc_clamped((x[j] - min) * id + 0.5f, 0, 31);
            const int q1 = trunc_clamped((x[QK5_1 / 2 + j] - min) * id + 0.5f, 0, 31);
            y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= static_cast<uint32_t>(q0 >> 4) << j;
            qh |= static_cast<uint32_t>(q1 >> 4) << (j + QK5_1 / 2);
        }
        store_qh(y[i].qh, qh);
    }
}

void dequantize_row_q5_1(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ5_1*>(src);
    for (int64_t i = 0; i < n / QK5_1; ++i, y += QK5_1) {
        const float d = f16_to_f32(x[i].d);
        const float m = f16_to_f32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK5_1 / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1) << 4;
            const int h1 = static_cast<int>((qh >> (j + QK5_1 / 2)) & 1) << 4;
            y[j] = static_cast<float>((x[i].qs[j] & 0x0F) | h0) * d + m;
            y[j + QK5_1 / 2] = static_cast<float>((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

float vec_dot_q5_1_q8_1(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ5_1*>(vx);
    const auto* y = static_cast<const BlockQ8_1*>(vy);
    double sum = 0;
    for (int64_t i = 0; i < n / QK5_1; ++i) {
        const uint32_t qh = load_qh(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < QK5_1 / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1) << 4;
            const int h1 = static_cast<int>((qh >> (j + QK5_1 / 2)) & 1) << 4;
            sumi += ((x[i].qs[j] & 0x0F) | h0) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) | h1) * y[i].qs[j + QK5_1 / 2];
        }
        const double dy = f16_to_f32(y[i].d);
        sum += static_cast<double>(f16_to_f32(x[i].d)) * dy * sumi +
               static_cast<double>(f16_to_f32(x[i].m)) * dy * sum_i8(y[i].qs, QK8_1);
    }
    return static_cast<float>(sum);
}

// ---- Q8_0 -------------------------------------------------------------------------------------

void quantize_row_q8_0(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ8_0*>(dst);
    for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_f16(d);
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = round_to_i8(x[j] * id);
    }
}

void quantize_row_q8_0_scaled(const float* x, void* dst, int64_t n, float d) {
    auto* y = static_cast<BlockQ8_0*>(dst);
    const uint16_t d16 = f32_to_f16(d);
    const float dq = f16_to_f32(d16);  // the scale the dot product will use
    const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
    for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
        y[i].d = d16;
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = round_to_i8(x[j] * id);  // clamps to ±127
    }
}

void dequantize_row_q8_0(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ8_0*>(src);
    for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
        const float d = f16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

float vec_dot_q8_0_q8_0(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ8_0*>(vx);
    const auto* y = static_cast<const BlockQ8_0*>(vy);
    double sum = 0;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
        sum += static_cast<double>(f16_to_f32(x[i].d)) * f16_to_f32(y[i].d) * sumi;
    }
    return static_cast<float>(sum);
}

// ---- Q8_1 (partner of Q4_1 and Q5_1) ----------------------------------------------------------

void quantize_row_q8_1(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ8_1*>(dst);
    for (int64_t i = 0; i < n / QK8_1; ++i, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) {
            y[i].qs[j] = round_to_i8(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = f32_to_f16(static_cast<float>(sum) * d);
    }
}

void dequantize_row_q8_1(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ8_1*>(src);
    for (int64_t i = 0; i < n / QK8_1; ++i, y += QK8_1) {
        const float d = f16_to_f32(x[i].d);
        for (int j = 0; j < QK8_1; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

float vec_dot_q8_1_q8_1(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ8_1*>(vx);
    const auto* y = static_cast<const BlockQ8_1*>(vy);
    double sum = 0;
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        int sumi = 0;
        for (int j = 0; j < QK8_1; ++j) sumi += x[i].qs[j] * y[i].qs[j];
        sum += static_cast<double>(f16_to_f32(x[i].d)) * f16_to_f32(y[i].d) * sumi;
    }
    return static_cast<float>(sum);
}

// ---- importance-weighted quantizers (ggml's quantize_row_*_impl with quant_weights) -------------
// One row at a time: sigma^2 is the mean square of the whole row. Each element's weight is
// importance * sqrt(sigma^2 + x^2); the symmetric types search the scale with make_qx_quants,
// the types with a minimum with the asymmetric search of the K-quants.

namespace {

float row_sigma2(const float* x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
    return sum_x2 / static_cast<float>(n);
}

void element_weights(const float* x, const float* qw, float sigma2, float* w) {
    for (int j = 0; j < 32; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

// The 5th bits of 32 levels, as the little-endian uint32 Q5 blocks store: element j at bit j
// for the first 16, the second 16 at bits 16..31.
uint32_t fifth_bits(const uint8_t* L) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qh |= static_cast<uint32_t>((L[j] & 0x10u) >> 4) << j;
        qh |= static_cast<uint32_t>((L[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    return qh;
}

}  // namespace

void quantize_row_q4_0_imatrix(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ4_0*>(dst);
    const float sigma2 = row_sigma2(x, n);
    float w[32];
    int8_t L[32];
    for (int64_t ib = 0; ib < n / QK4_0; ++ib) {
        const float* xb = x + QK4_0 * ib;
        element_weights(xb, qw + QK4_0 * ib, sigma2, w);
        const float d = detail::make_qx_quants(QK4_0, 8, xb, L, w);
        y[ib].d = f32_to_f16(d);
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
    }
}

void quantize_row_q4_1_imatrix(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ4_1*>(dst);
    const float sigma2 = row_sigma2(x, n);
    float w[32], min;
    uint8_t L[32], Laux[32];
    for (int64_t ib = 0; ib < n / QK4_1; ++ib) {
        const float* xb = x + QK4_1 * ib;
        element_weights(xb, qw + QK4_1 * ib, sigma2, w);
        const float d =
            detail::make_qkx2_quants(QK4_1, 15, xb, w, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[ib].d = f32_to_f16(d);
        y[ib].m = f32_to_f16(-min);
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
    }
}

void quantize_row_q5_0_imatrix(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ5_0*>(dst);
    const float sigma2 = row_sigma2(x, n);
    float w[32];
    int8_t L[32];
    uint8_t U[32];
    for (int64_t ib = 0; ib < n / QK5_0; ++ib) {
        const float* xb = x + QK5_0 * ib;
        element_weights(xb, qw + QK5_0 * ib, sigma2, w);
        const float d = detail::make_qx_quants(QK5_0, 16, xb, L, w);
        y[ib].d = f32_to_f16(d);
        for (int j = 0; j < 32; ++j) U[j] = static_cast<uint8_t>(L[j]);
        for (int j = 0; j < 16; ++j)
            y[ib].qs[j] = static_cast<uint8_t>((U[j] & 0x0F) | ((U[j + 16] & 0x0F) << 4));
        store_qh(y[ib].qh, fifth_bits(U));
    }
}

void quantize_row_q5_1_imatrix(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ5_1*>(dst);
    const float sigma2 = row_sigma2(x, n);
    float w[32], min;
    uint8_t L[32], Laux[32];
    for (int64_t ib = 0; ib < n / QK5_1; ++ib) {
        const float* xb = x + QK5_1 * ib;
        element_weights(xb, qw + QK5_1 * ib, sigma2, w);
        const float d =
            detail::make_qkx2_quants(QK5_1, 31, xb, w, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[ib].d = f32_to_f16(d);
        y[ib].m = f32_to_f16(-min);
        for (int j = 0; j < 16; ++j)
            y[ib].qs[j] = static_cast<uint8_t>((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        store_qh(y[ib].qh, fifth_bits(L));
    }
}

}  // namespace syslm::kernels
