// Several tokens against Q4_0_G8 or Q8_0_G8W weight rows on the AMX int8 tiles: serving's
// decode steps (one token per sequence), a draft being verified. The VNNI kernels spend ~20
// instructions per token, weight row and 64 weights; here one tdpbsud does 16 tokens x 16 rows x
// 64 weights and the block scales cost ~5 instructions per token, row vector and block.
//
// Operands, per block pair (2p, 2p + 1) of a group of 8 blocks (block_layouts.hpp):
//   A (tokens x 64 bytes, signed): the activations' Q8_0_G8 quants at qs + 64p, as stored —
//     elements 0-15 of 2p, 0-15 of 2p + 1, 16-31 of 2p, 16-31 of 2p + 1;
//   B (16 rows of dwords, unsigned): the same 64 weight bytes of each of 16 weight rows (Q4_0_G8:
//     the low then the high nibbles of its 32 bytes qs + 32p; Q8_0_G8W: q + 128 at qs + 64p),
//     put in the tile's [K/4][row] layout by a 16 x 16 dword transpose. Two right operands per
//     pair, each with the other block's dwords zeroed, so that each product sums one block:
//     its scales apply in the epilogue, with the level offset (8 or 128) taken back out through
//     the activations' block sums.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/x86/amx_tiles.hpp"
#include "kernels/cpu/x86/simd.hpp"
#include "kernels/cpu/x86/transpose_avx512.hpp"
#include "kernels/quants/block_layouts.hpp"

namespace syslm::kernels::x86 {
namespace {

constexpr int kTile = 16;        // tokens per A tile, weight rows per call
constexpr int kMaxTokens = 64;   // matmul's token tiles

// Tiles (GCC's tile intrinsics take literal numbers): 0, 1 the products of the even and the odd
// block of a pair; 4 the activations; 6, 7 the weights of the even and the odd block.

template <DType W>
struct WeightLayout;

template <>
struct WeightLayout<DType::Q4_0_G8> {
    using Block = BlockQ4_0G8;
    static constexpr int kOffset = 8;
    // The 64 levels (0..15) of pair p in A's element order.
    static __m512i pair(const Block& g, int p) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.qs + 32 * p));
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        return _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_and_si256(v, m4)),
            _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), 1);
    }
};

template <>
struct WeightLayout<DType::Q8_0_G8W> {
    using Block = BlockQ8_0G8W;
    static constexpr int kOffset = 128;
    static __m512i pair(const Block& g, int p) { return _mm512_loadu_si512(g.qs + 64 * p); }
};

template <DType W>
void dot_tokens(int64_t n, int nr, const void* vx, size_t bx, int nt, const void* vy, size_t by,
                float* s, size_t bs) {
    using L = WeightLayout<W>;
    using Block = typename L::Block;
    const int64_t groups = n / (kG8Blocks * QK8_0);
    const int chunks = (nt + kTile - 1) / kTile;
    alignas(64) float acc[kMaxTokens][kTile] = {};
    alignas(64) uint8_t b_even[kTile * 64], b_odd[kTile * 64];
    alignas(64) int32_t c_even[kTile * kTile], c_odd[kTile * kTile];
    alignas(64) float dw[kG8Blocks][kTile];  // weight scales per block (block order) x row
    // A partial last chunk reads its activations from here: 16 rows, the missing ones zero.
    thread_local std::vector<uint8_t> padded;
    const uint8_t* ys = static_cast<const uint8_t*>(vy);
    const uint8_t* y_last = ys + static_cast<size_t>(chunks - 1) * kTile * by;
    if (nt % kTile) {
        padded.assign(kTile * by, 0);
        std::memcpy(padded.data(), y_last, (nt % kTile) * by);
        y_last = padded.data();
    }
    auto rows_of = [&](int c) { return c == chunks - 1 ? y_last : ys + c * kTile * by; };

    configure_tiles();
    for (int64_t g = 0; g < groups; ++g) {
        const Block* w[kTile];
        for (int r = 0; r < kTile; ++r)
            w[r] = r < nr ? reinterpret_cast<const Block*>(static_cast<const uint8_t*>(vx) +
                                                           r * bx) + g
                          : nullptr;
        for (int b = 0; b < kG8Blocks; ++b)
            for (int r = 0; r < kTile; ++r)
                dw[b][r] = w[r] ? _cvtsh_ss(w[r]->d[kG8Slot[b]]) : 0.0f;
        for (int p = 0; p < kG8Blocks / 2; ++p) {
            __m512 rows[kTile], cols[kTile];
            for (int r = 0; r < kTile; ++r)
                rows[r] = w[r] ? _mm512_castsi512_ps(L::pair(*w[r], p)) : _mm512_setzero_ps();
            transpose16(rows, cols);  // cols[k]: dword k (K bytes 4k..4k+3) of every row
            for (int k = 0; k < kTile; ++k) {
                const bool even = k % 8 < 4;  // K bytes 0-15 and 32-47: block 2p
                _mm512_store_ps(reinterpret_cast<float*>((even ? b_even : b_odd) + 64 * k),
                                cols[k]);
                _mm512_store_ps(reinterpret_cast<float*>((even ? b_odd : b_even) + 64 * k),
                                _mm512_setzero_ps());
            }
            memory_fence();
            _tile_loadd(6, b_even, 64);
            _tile_loadd(7, b_odd, 64);
            const size_t qs_off = g * sizeof(BlockQ8_0G8) + offsetof(BlockQ8_0G8, qs) + 64 * p;
            for (int c = 0; c < chunks; ++c) {
                const uint8_t* yc = rows_of(c);
                _tile_loadd(4, yc + qs_off, static_cast<long>(by));
                _tile_zero(0);
                _tile_zero(1);
                _tile_dpbsud(0, 4, 6);
                _tile_dpbsud(1, 4, 7);
                _tile_stored(0, c_even, 64);
                _tile_stored(1, c_odd, 64);
                memory_fence();
                const int tc = std::min(kTile, nt - c * kTile);
                for (int h = 0; h < 2; ++h) {
                    const int b = 2 * p + h, slot = kG8Slot[b];
                    const int32_t* cs = h ? c_odd : c_even;
                    const __m512 dwv = _mm512_load_ps(dw[b]);
                    for (int t = 0; t < tc; ++t) {
                        const auto* yg = reinterpret_cast<const BlockQ8_0G8*>(
                                             yc + static_cast<size_t>(t) * by) + g;
                        const __m512i sums = _mm512_sub_epi32(
                            _mm512_load_si512(cs + t * kTile),
                            _mm512_set1_epi32(L::kOffset * yg->s[slot]));
                        const __m512 scale = _mm512_mul_ps(dwv, _mm512_set1_ps(yg->d[slot]));
                        float* a = acc[c * kTile + t];
                        _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale,
                                                           _mm512_load_ps(a)));
                    }
                }
            }
        }
    }
    _tile_release();
    for (int t = 0; t < nt; ++t) std::memcpy(s + t * bs, acc[t], nr * sizeof(float));
}

}  // namespace

void dot_tokens_amx_int8(DType type, int64_t n, int nr, const void* x, size_t bx, int nt,
                         const void* y, size_t by, float* s, size_t bs) {
    SYSLM_CHECK(nr >= 1 && nr <= kTile && nt >= 1 && nt <= kMaxTokens && n % 256 == 0,
                "AMX int8 dots: ", nr, " rows x ", nt, " tokens of ", n, " (at most ", kTile,
                " x ", kMaxTokens, ", whole groups of 256)");
    if (type == DType::Q4_0_G8)
        return dot_tokens<DType::Q4_0_G8>(n, nr, x, bx, nt, y, by, s, bs);
    if (type == DType::Q8_0_G8W)
        return dot_tokens<DType::Q8_0_G8W>(n, nr, x, bx, nt, y, by, s, bs);
    fail("AMX int8 dots: no kernel for ", dtype_name(type));
}

}  // namespace syslm::kernels::x86
