// The run-time lane-order layouts Q4_K_LANE, Q5_K_LANE, Q6_K_LANE and Q8_K_LANE
// (block_layouts.hpp). They hold exactly the numbers of Q4_K / Q5_K / Q6_K / Q8_K, moved within
// each block: every function here converts to or from the file type and reuses its reference, so
// these references are right by construction, and the SIMD kernels
// (kernels/cpu/x86/quant_dot_body.hpp) are tested against them.
#include <cstring>
#include <vector>

#include "kernels/quants/block_layouts.hpp"
#include "kernels/quants/quant_rows.hpp"

namespace syslm::kernels {
namespace {

uint32_t load_word(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

void store_word(uint8_t* p, uint32_t v) {
    std::memcpy(p, &v, sizeof v);
}

// The four levels of elements e0..e0+3 (e0 a multiple of 4) in the file layout, one per byte,
// and their store: the unit the lane order moves (block_layouts.hpp). Word-wide, since every
// Q4_K / Q6_K matrix of a model goes through here once at load.
struct Q4KUnits {
    // Chunk e0 / 64, nibble plane (e0 / 32) % 2, bytes e0 % 32 ...
    static int at(int e0) { return 32 * (e0 / 64) + e0 % 32; }
    static uint32_t get(const BlockQ4_K& b, int e0) {
        return (load_word(b.qs + at(e0)) >> (4 * ((e0 / 32) % 2))) & 0x0F0F0F0Fu;
    }
    static void set(BlockQ4_K& b, int e0, uint32_t levels) {
        const int shift = 4 * ((e0 / 32) % 2);
        uint8_t* p = b.qs + at(e0);
        store_word(p, (load_word(p) & ~(0x0F0F0F0Fu << shift)) | levels << shift);
    }
};

struct Q5KUnits {
    // Q4_K's nibbles, bit 4 from qh[e0 % 32...] at bit e0 / 32.
    static uint32_t get(const BlockQ5_K& b, int e0) {
        const uint32_t lo =
            (load_word(b.qs + Q4KUnits::at(e0)) >> (4 * ((e0 / 32) % 2))) & 0x0F0F0F0Fu;
        return lo | ((load_word(b.qh + e0 % 32) >> (e0 / 32)) & 0x01010101u) << 4;
    }
    static void set(BlockQ5_K& b, int e0, uint32_t levels) {
        const int shift = 4 * ((e0 / 32) % 2), bit = e0 / 32;
        uint8_t* p = b.qs + Q4KUnits::at(e0);
        store_word(p, (load_word(p) & ~(0x0F0F0F0Fu << shift)) | (levels & 0x0F0F0F0Fu) << shift);
        uint8_t* h = b.qh + e0 % 32;
        store_word(h, (load_word(h) & ~(0x01010101u << bit)) | ((levels >> 4) & 0x01010101u)
                                                                   << bit);
    }
};

struct Q6KUnits {
    // In half h = e0 / 128, run r = (e0 % 128) / 32, position l = e0 % 32: the low nibbles in
    // ql[64h + 32 (r % 2) + l...] (high nibbles for r >= 2), the top two bits in qh[32h + l...]
    // at bit 2r.
    static int low(int e0) { return 64 * (e0 / 128) + 32 * ((e0 % 128) / 32 % 2) + e0 % 32; }
    static int high(int e0) { return 32 * (e0 / 128) + e0 % 32; }
    static uint32_t get(const BlockQ6_K& b, int e0) {
        const int r = (e0 % 128) / 32;
        const uint32_t lo = (load_word(b.ql + low(e0)) >> (4 * (r / 2))) & 0x0F0F0F0Fu;
        const uint32_t hi = (load_word(b.qh + high(e0)) >> (2 * r)) & 0x03030303u;
        return lo | hi << 4;
    }
    static void set(BlockQ6_K& b, int e0, uint32_t levels) {
        const int r = (e0 % 128) / 32, ls = 4 * (r / 2), hs = 2 * r;
        uint8_t* lo = b.ql + low(e0);
        store_word(lo, (load_word(lo) & ~(0x0F0F0F0Fu << ls)) | (levels & 0x0F0F0F0Fu) << ls);
        uint8_t* hi = b.qh + high(e0);
        store_word(hi, (load_word(hi) & ~(0x03030303u << hs)) | ((levels >> 4) & 0x03030303u)
                                                                    << hs);
    }
};

// The same block with its levels in the other order (the permutation is its own inverse).
template <typename Block, typename Units>
void permute_block(const Block& in, Block& out) {
    out = in;
    for (int e0 = 0; e0 < QK_K; e0 += 4) Units::set(out, lane_position(e0), Units::get(in, e0));
}

void permute_q8_k(const BlockQ8_K& in, BlockQ8_K& out) {
    out = in;
    for (int e0 = 0; e0 < QK_K; e0 += 4) std::memcpy(out.qs + lane_position(e0), in.qs + e0, 4);
}

template <typename Block, typename Units>
void permute_row(const void* src, void* dst, int64_t n) {
    const auto* in = static_cast<const Block*>(src);
    auto* out = static_cast<Block*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i) permute_block<Block, Units>(in[i], out[i]);
}

// The file type's reference, block by block on the blocks moved back to file order.
template <typename Block, typename Units>
void dequantize_lane(const void* src, float* dst, int64_t n,
                     void (*dequantize)(const void*, float*, int64_t)) {
    const auto* in = static_cast<const Block*>(src);
    Block b;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        permute_block<Block, Units>(in[i], b);
        dequantize(&b, dst + i * QK_K, QK_K);
    }
}

template <typename Block, typename Units>
void quantize_lane(const float* src, void* dst, int64_t n,
                   void (*quantize)(const float*, void*, int64_t)) {
    auto* out = static_cast<Block*>(dst);
    Block b;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        quantize(src + i * QK_K, &b, QK_K);
        permute_block<Block, Units>(b, out[i]);
    }
}

// The file type's reference on both rows moved back to file order: the same result, bit for bit.
template <typename Block, typename Units>
float dot_lane(int64_t n, const void* vx, const void* vy,
               float (*dot)(int64_t, const void*, const void*)) {
    const auto* x = static_cast<const Block*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    std::vector<Block> xf(static_cast<size_t>(n / QK_K));
    std::vector<BlockQ8_K> yf(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) {
        permute_block<Block, Units>(x[i], xf[i]);
        permute_q8_k(y[i], yf[i]);
    }
    return dot(n, xf.data(), yf.data());
}

}  // namespace

void q4_k_to_lane(const void* src, void* dst, int64_t n) {
    permute_row<BlockQ4_K, Q4KUnits>(src, dst, n);
}

void q5_k_to_lane(const void* src, void* dst, int64_t n) {
    permute_row<BlockQ5_K, Q5KUnits>(src, dst, n);
}

void q6_k_to_lane(const void* src, void* dst, int64_t n) {
    permute_row<BlockQ6_K, Q6KUnits>(src, dst, n);
}

void q8_k_to_lane(const void* src, void* dst, int64_t n) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    auto* out = static_cast<BlockQ8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i) permute_q8_k(in[i], out[i]);
}

void dequantize_row_q4_k_lane(const void* src, float* dst, int64_t n) {
    dequantize_lane<BlockQ4_K, Q4KUnits>(src, dst, n, dequantize_row_q4_k);
}

void quantize_row_q4_k_lane(const float* src, void* dst, int64_t n) {
    quantize_lane<BlockQ4_K, Q4KUnits>(src, dst, n, quantize_row_q4_k);
}

float vec_dot_q4_k_lane_q8_k_lane(int64_t n, const void* x, const void* y) {
    return dot_lane<BlockQ4_K, Q4KUnits>(n, x, y, vec_dot_q4_k_q8_k);
}

void dequantize_row_q5_k_lane(const void* src, float* dst, int64_t n) {
    dequantize_lane<BlockQ5_K, Q5KUnits>(src, dst, n, dequantize_row_q5_k);
}

void quantize_row_q5_k_lane(const float* src, void* dst, int64_t n) {
    quantize_lane<BlockQ5_K, Q5KUnits>(src, dst, n, quantize_row_q5_k);
}

float vec_dot_q5_k_lane_q8_k_lane(int64_t n, const void* x, const void* y) {
    return dot_lane<BlockQ5_K, Q5KUnits>(n, x, y, vec_dot_q5_k_q8_k);
}

void dequantize_row_q6_k_lane(const void* src, float* dst, int64_t n) {
    dequantize_lane<BlockQ6_K, Q6KUnits>(src, dst, n, dequantize_row_q6_k);
}

void quantize_row_q6_k_lane(const float* src, void* dst, int64_t n) {
    quantize_lane<BlockQ6_K, Q6KUnits>(src, dst, n, quantize_row_q6_k);
}

float vec_dot_q6_k_lane_q8_k_lane(int64_t n, const void* x, const void* y) {
    return dot_lane<BlockQ6_K, Q6KUnits>(n, x, y, vec_dot_q6_k_q8_k);
}

void dequantize_row_q8_k_lane(const void* src, float* dst, int64_t n) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    BlockQ8_K b;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        permute_q8_k(in[i], b);
        dequantize_row_q8_k(&b, dst + i * QK_K, QK_K);
    }
}

void quantize_row_q8_k_lane(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ8_K*>(dst);
    BlockQ8_K b;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        quantize_row_q8_k(src + i * QK_K, &b, QK_K);
        permute_q8_k(b, out[i]);
    }
}

float vec_dot_q8_k_lane_q8_k_lane(int64_t n, const void* x, const void* y) {
    const size_t bytes = static_cast<size_t>(n / QK_K) * sizeof(BlockQ8_K);
    std::vector<uint8_t> xf(bytes), yf(bytes);
    q8_k_to_lane(x, xf.data(), n);
    q8_k_to_lane(y, yf.data(), n);
    return vec_dot_q8_k_q8_k(n, xf.data(), yf.data());
}

}  // namespace syslm::kernels
