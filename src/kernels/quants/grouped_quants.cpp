// The run-time grouped layouts Q4_0_G8 and Q8_0_G8 (block_layouts.hpp). They hold exactly the
// numbers of Q4_0 / Q8_0, moved: every function here converts to or from the file type and
// reuses its reference, so these references are right by construction, and the SIMD kernel
// (kernels/cpu/x86/quant_dot_body.hpp) is tested against them.
#include <cstring>

#include "core/half.hpp"
#include "kernels/quants/block_layouts.hpp"
#include "kernels/quants/quant_rows.hpp"

namespace syslm::kernels {
namespace {

constexpr int64_t kGroup = kG8Blocks * QK4_0;  // elements per group

void q4_0_group_to_g8(const BlockQ4_0* x, BlockQ4_0G8& g) {
    for (int b = 0; b < kG8Blocks; ++b) {
        g.d[kG8Slot[b]] = x[b].d;
        std::memcpy(g.qs + b * (QK4_0 / 2), x[b].qs, QK4_0 / 2);
    }
}

void g8_group_to_q4_0(const BlockQ4_0G8& g, BlockQ4_0* x) {
    for (int b = 0; b < kG8Blocks; ++b) {
        x[b].d = g.d[kG8Slot[b]];
        std::memcpy(x[b].qs, g.qs + b * (QK4_0 / 2), QK4_0 / 2);
    }
}

int8_t* g8_quants(BlockQ8_0G8& g, int b, int half) {
    return g.qs + g8_pair_offset(b, half);
}

const int8_t* g8_quants(const BlockQ8_0G8& g, int b, int half) {
    return g.qs + g8_pair_offset(b, half);
}

void q8_0_group_to_g8(const BlockQ8_0* x, BlockQ8_0G8& g) {
    for (int b = 0; b < kG8Blocks; ++b) {
        int sum = 0;
        for (int j = 0; j < QK8_0; ++j) sum += x[b].qs[j];
        g.d[kG8Slot[b]] = f16_to_f32(x[b].d);
        g.s[kG8Slot[b]] = sum;
        std::memcpy(g8_quants(g, b, 0), x[b].qs, 16);
        std::memcpy(g8_quants(g, b, 1), x[b].qs + 16, 16);
    }
}

void g8_group_to_q8_0(const BlockQ8_0G8& g, BlockQ8_0* x) {
    for (int b = 0; b < kG8Blocks; ++b) {
        // d was widened from f16, so narrowing it back is exact.
        x[b].d = f32_to_f16(g.d[kG8Slot[b]]);
        std::memcpy(x[b].qs, g8_quants(g, b, 0), 16);
        std::memcpy(x[b].qs + 16, g8_quants(g, b, 1), 16);
    }
}

void q8_0_group_to_g8w(const BlockQ8_0* x, BlockQ8_0G8W& g) {
    for (int b = 0; b < kG8Blocks; ++b) {
        g.d[kG8Slot[b]] = x[b].d;
        for (int j = 0; j < QK8_0; ++j) {
            g.qs[g8_pair_offset(b, j / 16) + j % 16] = static_cast<uint8_t>(x[b].qs[j] + 128);
        }
    }
}

void g8w_group_to_q8_0(const BlockQ8_0G8W& g, BlockQ8_0* x) {
    for (int b = 0; b < kG8Blocks; ++b) {
        x[b].d = g.d[kG8Slot[b]];
        for (int j = 0; j < QK8_0; ++j) {
            const int q = g.qs[g8_pair_offset(b, j / 16) + j % 16];
            x[b].qs[j] = static_cast<int8_t>(q - 128);
        }
    }
}

}  // namespace

void q8_0_to_g8w(const void* src, void* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ8_0*>(src);
    auto* g = static_cast<BlockQ8_0G8W*>(dst);
    for (int64_t i = 0; i < n / kGroup; ++i) q8_0_group_to_g8w(x + i * kG8Blocks, g[i]);
}

void g8w_to_q8_0(const void* src, void* dst, int64_t n) {
    const auto* g = static_cast<const BlockQ8_0G8W*>(src);
    auto* x = static_cast<BlockQ8_0*>(dst);
    for (int64_t i = 0; i < n / kGroup; ++i) g8w_group_to_q8_0(g[i], x + i * kG8Blocks);
}

void dequantize_row_q8_0_g8w(const void* src, float* dst, int64_t n) {
    const auto* g = static_cast<const BlockQ8_0G8W*>(src);
    BlockQ8_0 x[kG8Blocks];
    for (int64_t i = 0; i < n / kGroup; ++i) {
        g8w_group_to_q8_0(g[i], x);
        dequantize_row_q8_0(x, dst + i * kGroup, kGroup);
    }
}

void quantize_row_q8_0_g8w(const float* src, void* dst, int64_t n) {
    auto* g = static_cast<BlockQ8_0G8W*>(dst);
    BlockQ8_0 x[kG8Blocks];
    for (int64_t i = 0; i < n / kGroup; ++i) {
        quantize_row_q8_0(src + i * kGroup, x, kGroup);
        q8_0_group_to_g8w(x, g[i]);
    }
}

float vec_dot_q8_0_g8w_q8_0_g8(int64_t n, const void* vx, const void* vy) {
    const auto* gx = static_cast<const BlockQ8_0G8W*>(vx);
    const auto* gy = static_cast<const BlockQ8_0G8*>(vy);
    BlockQ8_0 x[kG8Blocks], y[kG8Blocks];
    double sum = 0;
    for (int64_t i = 0; i < n / kGroup; ++i) {
        g8w_group_to_q8_0(gx[i], x);
        g8_group_to_q8_0(gy[i], y);
        sum += vec_dot_q8_0_q8_0(kGroup, x, y);
    }
    return static_cast<float>(sum);
}

void q4_0_to_g8(const void* src, void* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ4_0*>(src);
    auto* g = static_cast<BlockQ4_0G8*>(dst);
    for (int64_t i = 0; i < n / kGroup; ++i) q4_0_group_to_g8(x + i * kG8Blocks, g[i]);
}

void g8_to_q4_0(const void* src, void* dst, int64_t n) {
    const auto* g = static_cast<const BlockQ4_0G8*>(src);
    auto* x = static_cast<BlockQ4_0*>(dst);
    for (int64_t i = 0; i < n / kGroup; ++i) g8_group_to_q4_0(g[i], x + i * kG8Blocks);
}

void q8_0_to_g8(const void* src, void* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ8_0*>(src);
    auto* g = static_cast<BlockQ8_0G8*>(dst);
    for (int64_t i = 0; i < n / kGroup; ++i) q8_0_group_to_g8(x + i * kG8Blocks, g[i]);
}

void g8_to_q8_0(const void* src, void* dst, int64_t n) {
    const auto* g = static_cast<const BlockQ8_0G8*>(src);
    auto* x = static_cast<BlockQ8_0*>(dst);
    for (int64_t i = 0; i < n / kGroup; ++i) g8_group_to_q8_0(g[i], x + i * kG8Blocks);
}

void dequantize_row_q4_0_g8(const void* src, float* dst, int64_t n) {
    const auto* g = static_cast<const BlockQ4_0G8*>(src);
    BlockQ4_0 x[kG8Blocks];
    for (int64_t i = 0; i < n / kGroup; ++i) {
        g8_group_to_q4_0(g[i], x);
        dequantize_row_q4_0(x, dst + i * kGroup, kGroup);
    }
}

void quantize_row_q4_0_g8(const float* src, void* dst, int64_t n) {
    auto* g = static_cast<BlockQ4_0G8*>(dst);
    BlockQ4_0 x[kG8Blocks];
    for (int64_t i = 0; i < n / kGroup; ++i) {
        quantize_row_q4_0(src + i * kGroup, x, kGroup);
        q4_0_group_to_g8(x, g[i]);
    }
}

void dequantize_row_q8_0_g8(const void* src, float* dst, int64_t n) {
    const auto* g = static_cast<const BlockQ8_0G8*>(src);
    BlockQ8_0 x[kG8Blocks];
    for (int64_t i = 0; i < n / kGroup; ++i) {
        g8_group_to_q8_0(g[i], x);
        dequantize_row_q8_0(x, dst + i * kGroup, kGroup);
    }
}

void quantize_row_q8_0_g8(const float* src, void* dst, int64_t n) {
    auto* g = static_cast<BlockQ8_0G8*>(dst);
    BlockQ8_0 x[kG8Blocks];
    for (int64_t i = 0; i < n / kGroup; ++i) {
        quantize_row_q8_0(src + i * kGroup, x, kGroup);
        q8_0_group_to_g8(x, g[i]);
    }
}

// Group by group through the file types' reference dot (per-block integers exact, block
// results summed in double inside a group; the groups' float results summed in double).
float vec_dot_q4_0_g8_q8_0_g8(int64_t n, const void* vx, const void* vy) {
    const auto* gx = static_cast<const BlockQ4_0G8*>(vx);
    const auto* gy = static_cast<const BlockQ8_0G8*>(vy);
    BlockQ4_0 x[kG8Blocks];
    BlockQ8_0 y[kG8Blocks];
    double sum = 0;
    for (int64_t i = 0; i < n / kGroup; ++i) {
        g8_group_to_q4_0(gx[i], x);
        g8_group_to_q8_0(gy[i], y);
        sum += vec_dot_q4_0_q8_0(kGroup, x, y);
    }
    return static_cast<float>(sum);
}

float vec_dot_q8_0_g8_q8_0_g8(int64_t n, const void* vx, const void* vy) {
    const auto* gx = static_cast<const BlockQ8_0G8*>(vx);
    const auto* gy = static_cast<const BlockQ8_0G8*>(vy);
    BlockQ8_0 x[kG8Blocks], y[kG8Blocks];
    double sum = 0;
    for (int64_t i = 0; i < n / kGroup; ++i) {
        g8_group_to_q8_0(gx[i], x);
        g8_group_to_q8_0(gy[i], y);
        sum += vec_dot_q8_0_q8_0(kGroup, x, y);
    }
    return static_cast<float>(sum);
}

}  // namespace syslm::kernels
