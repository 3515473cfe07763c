// Peaks of the AMX tile unit for `syslm probe`: four independent 16 x 16 accumulator tiles fed
// by two left and two right operand tiles, as the GEMM (gemm_amx.cpp) issues them. Operands stay
// in the tiles, so the loop runs at the tile unit's issue rate.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/peak.hpp"
#include "kernels/cpu/x86/amx_tiles.hpp"
#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

// The operands: bf16 1.0 (as int8: -128 and 63), so the bf16 accumulators stay ordinary numbers
// (int32 ones may wrap, which costs nothing). The fence keeps the stores: GCC dropped a memset
// that only the tile-load asm read.
void setup_tiles() {
    configure_tiles();
    alignas(64) uint16_t ones[16 * 32];
    for (uint16_t& v : ones) v = 0x3f80;  // bf16 1.0; as int8: 0x80 = -128, 0x3f = 63
    memory_fence();
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

// Four independent tile products per iteration; ops counted as multiply-adds x 2.
template <bool Int8>
double tile_peak(int64_t iters, float* sink) {
    setup_tiles();
    for (int64_t i = 0; i < iters; ++i) {
        if constexpr (Int8) {
            _tile_dpbssd(0, 4, 6);
            _tile_dpbssd(1, 4, 7);
            _tile_dpbssd(2, 5, 6);
            _tile_dpbssd(3, 5, 7);
        } else {
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    *sink = finish();
    const int depth = Int8 ? 64 : 32;  // products per accumulator element per instruction
    return static_cast<double>(iters) * 4 * 16 * 16 * depth * 2;
}

}  // namespace

double peak_amx_bf16(int64_t iters, float* sink) {
    return tile_peak<false>(iters, sink);
}

double peak_amx_int8(int64_t iters, float* sink) {
    return tile_peak<true>(iters, sink);
}

}  // namespace syslm::kernels::x86
