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

// Per thread, before its first tile instruction; _tile_release() after the last.
void configure_tiles() {
    _tile_loadconfig(&kTileConfig);
}

}  // namespace
}  // namespace syslm::kernels::x86
