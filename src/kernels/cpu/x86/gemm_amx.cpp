// Prefill GEMM on the AMX tile unit (Intel Xeon 4th generation and later): y = x W^T (+ b) with
// both operands rounded to bf16 and products accumulated in f32 by tdpbf16ps — the precision of
// the BF16 panels (gemm.hpp), at several times their speed.
//
// The weights are the tiles' left operand, read as stored: threads split the weight rows in
// panels of 32, each dequantized (to_float) and rounded to bf16 rows — no transpose. The
// activations are the right operand, packed once per call in the pair layout the tiles read
// ([k/2][32 tokens][2], gemm_kernels(Avx512).pack_bf16_from_f32). Each panel is swept by every
// block of 32 tokens with four 16 x 16 accumulator tiles (2 x 2): per 32 depth steps two
// weight tiles and two token tiles are loaded and four tile products issued; the depth goes in
// blocks (see below), and each output tile is stored into y, transposed, once its depth is done.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/scratch.hpp"
#include "kernels/cpu/x86/amx_tiles.hpp"
#include "kernels/cpu/x86/simd.hpp"
#include "kernels/cpu/x86/transpose_avx512.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels::x86 {
namespace {

constexpr int kTile = 16;   // tile rows; 16 f32 or 32 bf16 per 64-byte tile row
constexpr int kBlock = 32;  // tokens and weight rows per block (2 x 2 tiles)
// Tiles 0-3: accumulators (32 weight rows x 32 tokens); 4-5: weight rows (16 rows x 32 depth);
// 6-7: token pairs (16 depth pairs x 16 tokens x 2).

int64_t round_up(int64_t v, int64_t m) {
    return (v + m - 1) / m * m;
}

// K floats to bf16 (round to nearest even), zero-padded to Kp.
void bf16_row(const float* x, int64_t K, int64_t Kp, uint16_t* dst) {
    int64_t k = 0;
    for (; k + 16 <= K; k += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + k)));
    if (k < K) {
        const __mmask16 m = static_cast<__mmask16>((1u << (K - k)) - 1);
        _mm256_mask_storeu_epi16(
            dst + k, m,
            (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + k)));
        k += 16;
    }
    for (k = K; k < Kp; ++k) dst[k] = 0;
}

// The finished 32 x 32 block c ([weight row r][token t]) into y[t * ldy + r] (+ bias[r]), for
// t < m, r < n, by 16 x 16 register transposes (a scalar transposed copy cost a tenth of a
// prefill).
void store_transposed(const float* c, int m, int n, const float* bias, float* y, int64_t ldy) {
    for (int rq = 0; rq < n; rq += kTile) {
        const int nr = std::min(kTile, n - rq);
        const __mmask16 rows = static_cast<__mmask16>((1u << nr) - 1);
        const __m512 b = bias ? _mm512_maskz_loadu_ps(rows, bias + rq) : _mm512_setzero_ps();
        for (int tq = 0; tq < m; tq += kTile) {
            __m512 r[kTile], t[kTile];
            for (int i = 0; i < kTile; ++i) r[i] = _mm512_loadu_ps(c + (rq + i) * kBlock + tq);
            transpose16(r, t);
            const int mt = std::min(kTile, m - tq);
            for (int k = 0; k < mt; ++k)
                _mm512_mask_storeu_ps(y + (tq + k) * ldy + rq, rows, _mm512_add_ps(t[k], b));
        }
    }
}

}  // namespace

void gemm_amx_bf16(const WeightView& w, const float* x, int64_t T, float* y, ThreadPool& pool,
                   const float* bias) {
    const int64_t K = w.n_in, N = w.n_out;
    if (T <= 0 || N <= 0) return;
    const int64_t Kp = round_up(K, 32), token_blocks = (T + kBlock - 1) / kBlock;
    const GemmKernels& kn = gemm_kernels(Isa::Avx512);
    const TypeTraits& tt = type_traits(w.type, Isa::Avx512);

    // Tokens as the tiles' right operand: per block of 32, [Kp/2][32 tokens][2] bf16, zero past
    // T and K (pack_bf16_from_f32's panel layout, with tokens for rows).
    thread_local Scratch x_scratch;
    uint16_t* xb = x_scratch.get<uint16_t>(static_cast<size_t>(token_blocks * kBlock * Kp));
    pool.parallel_for(token_blocks, [&](int64_t b, int64_t e, int) {
        for (int64_t tb = b; tb < e; ++tb)
            kn.pack_bf16_from_f32(x + tb * kBlock * K, K, std::min<int64_t>(kBlock, T - tb * kBlock),
                                  K, xb + tb * kBlock * Kp);
        // K < Kp: the pair rows past K/2 must be zero too (the packer writes ceil(K/2) rows).
        for (int64_t tb = b; tb < e; ++tb) {
            uint16_t* blk = xb + tb * kBlock * Kp;
            const int64_t written = (K + 1) / 2 * 2 * kBlock;
            std::memset(blk + written, 0, static_cast<size_t>(kBlock * Kp - written) * 2);
        }
    });

    // Weights as the left operand, rounded to bf16 rows as stored (no transpose). Output tiles
    // are weight rows x tokens, written to y transposed. The depth goes in blocks of kDepth:
    // for each, every panel of the thread is dequantized once and swept by every token block,
    // so the tokens' slice of the block (T x kDepth bf16, 1 MiB at 512 tokens) stays in L2
    // across panels instead of streaming from memory once per panel. Accumulators of the
    // unfinished depth wait in a per-thread buffer of 32 x 32 tiles.
    constexpr int64_t kDepth = 1024;  // a multiple of every block size (QK_K = 256)
    const int64_t blck = dtype_info(w.type).block_size;
    const size_t blck_bytes = dtype_info(w.type).type_size;
    const size_t w_row = row_bytes(w.type, K);
    const auto* w_bytes = static_cast<const uint8_t*>(w.data);
    const int64_t panels = (N + kBlock - 1) / kBlock;
    pool.parallel_for(panels, [&](int64_t pb, int64_t pe, int) {
        thread_local Scratch row_scratch, w_scratch, acc_scratch;
        const int64_t kd_max = std::min(kDepth, Kp);
        float* row = row_scratch.get<float>(static_cast<size_t>(kd_max));
        // Rows of the dequantized panel are padded by one cache line: at 2 KiB (1024 bf16) a
        // tile load's 16 rows would all fall in two L1 sets and evict each other.
        const int64_t wld = kd_max + 32;
        uint16_t* wb = w_scratch.get<uint16_t>(static_cast<size_t>(kBlock * wld));
        const bool blocked = Kp > kDepth;
        float* acc = blocked ? acc_scratch.get<float>(static_cast<size_t>(
                                   (pe - pb) * token_blocks * kBlock * kBlock))
                             : nullptr;
        alignas(64) float c[kBlock * kBlock];
        configure_tiles();
        for (int64_t kb = 0; kb < Kp; kb += kDepth) {
            const int64_t kd = std::min(kDepth, Kp - kb);       // depth of this block (x32)
            const int64_t kv = std::max<int64_t>(0, std::min(kd, K - kb));  // of it, real
            const bool first = kb == 0, last = kb + kd >= Kp;
            for (int64_t p = pb; p < pe; ++p) {
                const int64_t o0 = p * kBlock;
                const int n = static_cast<int>(std::min<int64_t>(kBlock, N - o0));
                for (int r = 0; r < kBlock; ++r) {
                    uint16_t* dst = wb + r * wld;
                    if (r >= n || kv == 0) {
                        std::memset(dst, 0, static_cast<size_t>(kd) * 2);
                        continue;
                    }
                    const float* src = row;
                    if (w.type == DType::F32)
                        src = reinterpret_cast<const float*>(w_bytes) + (o0 + r) * K + kb;
                    else
                        tt.to_float(w_bytes + (o0 + r) * w_row +
                                        static_cast<size_t>(kb / blck) * blck_bytes,
                                    row, kv);
                    bf16_row(src, kv, kd, dst);
                }
                for (int64_t tb = 0; tb < token_blocks; ++tb) {
                    float* saved = blocked ? acc + ((p - pb) * token_blocks + tb) * kBlock * kBlock
                                           : nullptr;
                    if (first) {
                        _tile_zero(0);
                        _tile_zero(1);
                        _tile_zero(2);
                        _tile_zero(3);
                    } else {
                        _tile_loadd(0, saved, kBlock * 4);
                        _tile_loadd(1, saved + kTile, kBlock * 4);
                        _tile_loadd(2, saved + kTile * kBlock, kBlock * 4);
                        _tile_loadd(3, saved + kTile * kBlock + kTile, kBlock * 4);
                    }
                    const uint16_t* xt = xb + tb * kBlock * Kp + kb * kBlock;
                    for (int64_t k = 0; k < kd; k += 32) {
                        const uint16_t* b = xt + k * kBlock;  // pair row k/2: 32 tokens x 2
                        _tile_loadd(4, wb + k, wld * 2);
                        _tile_loadd(5, wb + kTile * wld + k, wld * 2);
                        _tile_loadd(6, b, kBlock * 4);
                        _tile_loadd(7, b + 2 * kTile, kBlock * 4);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                    // [r][t]: weight row r, token t.
                    float* out = last ? c : saved;
                    _tile_stored(0, out, kBlock * 4);
                    _tile_stored(1, out + kTile, kBlock * 4);
                    _tile_stored(2, out + kTile * kBlock, kBlock * 4);
                    _tile_stored(3, out + kTile * kBlock + kTile, kBlock * 4);
                    if (!last) continue;
                    const int64_t t0 = tb * kBlock;
                    const int m = static_cast<int>(std::min<int64_t>(kBlock, T - t0));
                    store_transposed(c, m, n, bias ? bias + o0 : nullptr, y + t0 * N + o0, N);
                }
            }
        }
        _tile_release();
    });
}

}  // namespace syslm::kernels::x86
