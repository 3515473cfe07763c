// The tile configuration the AMX files share (gemm_amx.cpp, peak_amx.cpp): eight tiles of 16
// rows x 64 bytes — four 16 x 16 f32/int32 accumulators, two left and two right operands.
// Internal linkage; included only by files compiled with the AMX flags.
#pragma once

#include <cstdint>

#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// A constant in memory: GCC 12 dropped the stores to a stack-local configuration that only
// ldtilecfg reads (SIGILL at the first tile instruction).
constexpr TileConfig make_tile_config() {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    return c;
}
constexpr TileConfig kTileConfig = make_tile_config();

// GCC's tile load and store intrinsics are asm statements without a memory operand: stores that
// only a tile load reads may be dropped as dead, and loads of what a tile store wrote may be
// moved before it. Put memory_fence() between them wherever a buffer passes between vector
// code and the tiles.
inline void memory_fence() {
    asm volatile("" : : : "memory");
}

// The 2 x 2 step of every AMX kernel here: left operand tiles 4, 5 from a0, a1 and right operand
// tiles 6, 7 from b0, b1 (rows lda / ldb bytes apart), products into the accumulators
// 0: a0 b0, 1: a0 b1, 2: a1 b0, 3: a1 b1.
inline void dp_bf16_2x2(const void* a0, const void* a1, int64_t lda, const void* b0,
                        const void* b1, int64_t ldb) {
    _tile_loadd(4, a0, lda);
    _tile_loadd(5, a1, lda);
    _tile_loadd(6, b0, ldb);
    _tile_loadd(7, b1, ldb);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
}

// The accumulators as one 32 x 32 f32 block at c (rows ld floats apart): 0 top left, 1 top
// right, 2 bottom left, 3 bottom right.
inline void zero_acc_2x2() {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}
inline void load_acc_2x2(const float* c, int64_t ld) {
    _tile_loadd(0, c, ld * 4);
    _tile_loadd(1, c + 16, ld * 4);
    _tile_loadd(2, c + 16 * ld, ld * 4);
    _tile_loadd(3, c + 16 * ld + 16, ld * 4);
}
inline void store_acc_2x2(float* c, int64_t ld) {
    _tile_stored(0, c, ld * 4);
    _tile_stored(1, c + 16, ld * 4);
    _tile_stored(2, c + 16 * ld, ld * 4);
    _tile_stored(3, c + 16 * ld + 16, ld * 4);
}

// Per thread, before its first tile instruction; _tile_release() after the last.
void configure_tiles() {
    _tile_loadconfig(&kTileConfig);
}

}  // namespace
}  // namespace syslm::kernels::x86
