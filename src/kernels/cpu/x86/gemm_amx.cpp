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

// Over 80 lines on purpose: the token packing and the tile loop share the scratch panels and the
// tile configuration; left as measured on the Xeon with AMX (2026-12-01), since a machine
// without the tiles cannot test a split.
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
                memory_fence();
                for (int64_t tb = 0; tb < token_blocks; ++tb) {
                    float* saved = blocked ? acc + ((p - pb) * token_blocks + tb) * kBlock * kBlock
                                           : nullptr;
                    if (first)
                        zero_acc_2x2();
                    else
                        load_acc_2x2(saved, kBlock);
                    const uint16_t* xt = xb + tb * kBlock * Kp + kb * kBlock;
                    for (int64_t k = 0; k < kd; k += 32) {
                        const uint16_t* b = xt + k * kBlock;  // pair row k/2: 32 tokens x 2
                        dp_bf16_2x2(wb + k, wb + kTile * wld + k, wld * 2, b, b + 2 * kTile,
                                    kBlock * 4);
                    }
                    // [r][t]: weight row r, token t.
                    store_acc_2x2(last ? c : saved, kBlock);
                    memory_fence();
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

// The training GEMMs (gemm.hpp's GemmOperand contract): y[t, o] (+)= sum_k x(t, k) w(o, k), each
// operand f32, as stored or transposed. Here the tokens are the tiles' left operand, as bf16
// rows ([t][k]; a transposed source goes through 16 x 16 register transposes), and the weights
// the right one, in the pair layout of the bf16 panels ([k/2][32 rows][2], the AVX-512
// packers), so each output tile is 16 tokens x 16 outputs, stored into y as it lies. Both
// operands are packed whole first (every shape of training packs each element once; y keeps
// the accumulators between depth blocks). The work is a grid of token chunks x panel groups,
// each swept in depth blocks whose token slice (kChunk x kDepth bf16, 512 KiB) stays in L2.
namespace {

// x(t, k) for t < T, k < K into dst[t * ld + k] as bf16, zero up to Tp rows and Kp columns;
// rows [t0, t1) only (t0 a multiple of 16).
void pack_token_rows(GemmOperand x, int64_t T, int64_t K, int64_t Kp, int64_t t0, int64_t t1,
                     uint16_t* dst, int64_t ld) {
    if (!x.transposed) {
        for (int64_t t = t0; t < t1; ++t) {
            if (t < T)
                bf16_row(x.data + t * x.ld, K, Kp, dst + t * ld);
            else
                std::memset(dst + t * ld, 0, static_cast<size_t>(Kp) * 2);
        }
        return;
    }
    // x(t, k) = x.data[k * ld + t]: a 16 x 16 block of depth rows, transposed in registers.
    for (int64_t tb = t0; tb < t1; tb += kTile) {
        const int64_t m = std::clamp<int64_t>(T - tb, 0, kTile);
        const __mmask16 lanes = static_cast<__mmask16>((1u << m) - 1);
        const int rows = static_cast<int>(std::min<int64_t>(kTile, t1 - tb));
        for (int64_t k0 = 0; k0 < Kp; k0 += kTile) {
            const int64_t kn = std::clamp<int64_t>(K - k0, 0, kTile);
            __m512 r[kTile], t[kTile];
            for (int i = 0; i < kTile; ++i)
                r[i] = i < kn ? _mm512_maskz_loadu_ps(lanes, x.data + (k0 + i) * x.ld + tb)
                              : _mm512_setzero_ps();
            transpose16(r, t);
            for (int j = 0; j < rows; ++j)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (tb + j) * ld + k0),
                                    (__m256i)_mm512_cvtneps_pbh(t[j]));
        }
    }
}

// Between y (rows of ldy floats) and a 16 x 16 tile of the accumulator block c (rows of kBlock
// floats): the m x n corner that exists.
void tile_from_y(const float* y, int64_t ldy, int m, int n, float* c) {
    const __mmask16 cols = static_cast<__mmask16>((1u << n) - 1);
    for (int i = 0; i < kTile; ++i)
        _mm512_store_ps(c + i * kBlock,
                        i < m ? _mm512_maskz_loadu_ps(cols, y + i * ldy) : _mm512_setzero_ps());
}

void tile_to_y(const float* c, int m, int n, const float* bias, float* y, int64_t ldy) {
    const __mmask16 cols = static_cast<__mmask16>((1u << n) - 1);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(cols, bias) : _mm512_setzero_ps();
    for (int i = 0; i < m; ++i)
        _mm512_mask_storeu_ps(y + i * ldy, cols, _mm512_add_ps(_mm512_load_ps(c + i * kBlock), b));
}

// Tile q of a 32 x 32 accumulator block: rows 16 (q / 2), columns 16 (q % 2).
float* quarter(float* c, int q) {
    return c + q / 2 * kTile * kBlock + q % 2 * kTile;
}

}  // namespace

// Over 80 lines on purpose: the operand packing, the accumulator blocks read from and written to
// y and the tile loop share the scratch panels and the tile configuration; left as measured on
// the Xeon with AMX (2026-12-01), since a machine without the tiles cannot test a split.
void gemm_amx_bf16_operands(GemmOperand x, GemmOperand w, int64_t T, int64_t N, int64_t K,
                            float* y, bool accumulate, ThreadPool& pool, const float* bias) {
    if (T <= 0 || N <= 0) return;
    if (K <= 0) {  // no products: y keeps its values (accumulate) or becomes the bias
        if (!accumulate)
            for (int64_t t = 0; t < T; ++t)
                for (int64_t o = 0; o < N; ++o) y[t * N + o] = bias ? bias[o] : 0.0f;
        return;
    }
    constexpr int64_t kChunk = 256, kDepth = 1024;
    const GemmKernels& kn = gemm_kernels(Isa::Avx512);
    const int64_t Kp = round_up(K, 32), Tp = round_up(T, kBlock);
    const int64_t panels = (N + kBlock - 1) / kBlock;
    // Token rows padded by one cache line against L1 set conflicts at power-of-two depths.
    const int64_t lda = Kp + 32;
    thread_local Scratch x_scratch, w_scratch;
    uint16_t* a = x_scratch.get<uint16_t>(static_cast<size_t>(Tp * lda));
    uint16_t* wb = w_scratch.get<uint16_t>(static_cast<size_t>(panels * Kp * kBlock));
    pool.parallel_for(Tp / kTile, [&](int64_t b, int64_t e, int) {
        pack_token_rows(x, T, K, Kp, b * kTile, e * kTile, a, lda);
    });
    pool.parallel_for(panels, [&](int64_t b, int64_t e, int) {
        for (int64_t p = b; p < e; ++p) {
            const int64_t o0 = p * kBlock;
            const int64_t n = std::min<int64_t>(kBlock, N - o0);
            uint16_t* dst = wb + p * Kp * kBlock;
            if (w.transposed)
                kn.pack_bf16_from_f32_t(w.data + o0, w.ld, n, K, dst);
            else
                kn.pack_bf16_from_f32(w.data + o0 * w.ld, w.ld, n, K, dst);
            const int64_t written = (K + 1) / 2 * 2 * kBlock;  // pair rows the packer wrote
            std::memset(dst + written, 0, static_cast<size_t>(Kp * kBlock - written) * 2);
        }
    });

    const int64_t chunks = (T + kChunk - 1) / kChunk;
    const int64_t group = std::clamp<int64_t>(panels * chunks / (4 * pool.size()), 1, 8);
    const int64_t groups = (panels + group - 1) / group;
    pool.parallel_for(chunks * groups, [&](int64_t ib, int64_t ie, int) {
        alignas(64) float c[kBlock * kBlock];
        configure_tiles();
        for (int64_t item = ib; item < ie; ++item) {
            const int64_t t_begin = item / groups * kChunk, t_end = std::min(T, t_begin + kChunk);
            const int64_t p_begin = item % groups * group,
                          p_end = std::min(panels, p_begin + group);
            for (int64_t kb = 0; kb < Kp; kb += kDepth) {
                const int64_t kd = std::min(kDepth, Kp - kb);
                const bool load = accumulate || kb > 0, last = kb + kd >= Kp;
                for (int64_t p = p_begin; p < p_end; ++p) {
                    const int64_t o0 = p * kBlock;
                    const int n = static_cast<int>(std::min<int64_t>(kBlock, N - o0));
                    const uint16_t* bp = wb + p * Kp * kBlock + kb * kBlock;
                    for (int64_t t0 = t_begin; t0 < t_end; t0 += kBlock) {
                        // Tile q: tokens t0 + 16 (q / 2), outputs o0 + 16 (q % 2).
                        int mq[2], nq[2];
                        for (int h = 0; h < 2; ++h) {
                            mq[h] = static_cast<int>(
                                std::clamp<int64_t>(T - t0 - h * kTile, 0, kTile));
                            nq[h] = std::clamp(n - h * kTile, 0, kTile);
                        }
                        if (load) {
                            for (int q = 0; q < 4; ++q)
                                tile_from_y(y + (t0 + q / 2 * kTile) * N + o0 + q % 2 * kTile, N,
                                            mq[q / 2], nq[q % 2], quarter(c, q));
                            memory_fence();
                            load_acc_2x2(c, kBlock);
                        } else {
                            zero_acc_2x2();
                        }
                        const uint16_t* at = a + t0 * lda + kb;
                        for (int64_t k = 0; k < kd; k += 32) {
                            const uint16_t* bt = bp + k * kBlock;  // pair row k/2: 32 outputs x 2
                            dp_bf16_2x2(at + k, at + kTile * lda + k, lda * 2, bt, bt + 2 * kTile,
                                        kBlock * 4);
                        }
                        store_acc_2x2(c, kBlock);
                        memory_fence();
                        for (int q = 0; q < 4; ++q) {
                            const int64_t oq = o0 + q % 2 * kTile;
                            if (mq[q / 2] > 0 && nq[q % 2] > 0)
                                tile_to_y(quarter(c, q), mq[q / 2], nq[q % 2],
                                          last && bias ? bias + oq : nullptr,
                                          y + (t0 + q / 2 * kTile) * N + oq, N);
                        }
                    }
                }
            }
        }
        _tile_release();
    });
}

}  // namespace syslm::kernels::x86
