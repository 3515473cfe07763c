// Peaks of the AMX tile unit for `syslm probe`: four independent 16 x 16 accumulator tiles fed
// by two left and two right operand tiles, as the GEMM (gemm_amx.cpp) issues them. Operands stay
// in the tiles, so the loop runs at the tile unit's issue rate.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/peak.hpp"
#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// A constant in memory: GCC may drop stores to a local that only ldtilecfg reads.
constexpr TileConfig make_config() {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    return c;
}
constexpr TileConfig kConfig = make_config();

void setup_tiles() {
    _tile_loadconfig(&kConfig);
    alignas(64) uint8_t ones[16 * 64];
    std::memset(ones, 1, sizeof ones);  // small operands: no overflow, no denormals
    _tile_zero(0);  // tile numbers must be literals
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
}

float finish() {
    alignas(64) float c[16 * 16];
    _tile_stored(0, c, 64);
    _tile_release();
    return c[0];
}

}  // namespace

double peak_amx_bf16(int64_t iters, float* sink) {
    setup_tiles();
    for (int64_t i = 0; i < iters; ++i) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    *sink = finish();
    return static_cast<double>(iters) * 4 * 16 * 16 * 32 * 2;
}

double peak_amx_int8(int64_t iters, float* sink) {
    setup_tiles();
    for (int64_t i = 0; i < iters; ++i) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    *sink = finish();
    return static_cast<double>(iters) * 4 * 16 * 16 * 64 * 2;
}

}  // namespace syslm::kernels::x86
