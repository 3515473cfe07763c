// Dense GEMM for prefill: many tokens times one weight matrix, y[t, o] = sum_k x[t, k] W[o, k]
// (+ b[o]), the same contract as matmul() but computed as a packed, cache-blocked GEMM with a
// register-blocked micro-kernel instead of one dot product per (row, token).
//
// Layout (BLIS-style, vectors along the weight rows): the micro-kernel keeps an mr x nr tile of
// y in registers (mr tokens x nr weight rows, nr a multiple of the vector width) and, for every
// k, multiplies nr packed weight values by one broadcast activation per token. Operands are packed
// so that both streams are contiguous:
//   activations  [token block of mr][k][mr]            (packed once per call, shared by threads)
//   weights      [panel of nr rows][k in the block][nr] (packed per kc x nc block, per thread,
//                converted on the fly from F16 / BF16 / any quantized type via to_float)
// Panel formats:
//   F32  — f32 panels, FMA. Exact products of the stored weights; activations stay f32.
//   BF16 — pairs of k as bf16 (vdpbf16ps, AVX512_BF16): panel [k/2][nr][2], activations rounded
//          to bf16 (round to nearest even). Used for BF16 weights (exact, as the vec_dot path,
//          whose partner type is BF16) and for dequantized quantized weights, whose own
//          quantization error exceeds bf16's 2^-9 rounding.
//   AMX_BF16 — the BF16 panels' arithmetic on the AMX tile unit (x86/gemm_amx.cpp): the same
//          roundings, f32 accumulation, several times the throughput where the CPU has AMX.
// Which panel a quantized or BF16 matrix uses is decided by timing the candidates once per
// process (gemm_panel_choice), not by feature flags: on some CPUs vdpbf16ps runs at half the
// FP32 FMA rate, and there F32 panels win.
// Blocks of kc = 256 keep quantized rows whole-block aligned (multiple of QK_K).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "core/thread_pool.hpp"
#include "kernels/isa.hpp"
#include "kernels/kernel_choices.hpp"

namespace syslm::kernels {

struct WeightView;

enum class GemmPanel { None, F32, BF16, AmxBF16 };
const char* gemm_panel_name(GemmPanel p);

// ISA-specific pieces of the GEMM. The driver (gemm.cpp) does blocking, threading and activation
// packing; an ISA file provides the micro-kernels and the weight-panel packers. A plain aggregate
// (no member initialisers: the ISA files build it, and must not emit inline constructors); fields
// a variant lacks are zero / null.
struct GemmKernels {
    Isa isa;
    int mr_f32, nr_f32;    // F32 micro-tile: tokens x weight rows
    int mr_bf16, nr_bf16;  // BF16 micro-tile; 0 when the CPU lacks AVX512_BF16

    // c[i * ldc + j] (i < m <= mr, j < n <= nr) = sum_k a[k * mr + i] * b[k * nr + j]
    //   (+ c if accumulate) (+ bias[j] if bias).
    void (*tile_f32)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m,
                     int n, const float* bias, bool accumulate);
    // The same over k pairs: a is [kc2][mr] uint32 (two bf16), b is [kc2][nr][2] bf16.
    void (*tile_bf16)(int64_t kc2, const uint32_t* a, const uint16_t* b, float* c, int64_t ldc,
                      int m, int n, const float* bias, bool accumulate);
    // Packs rows[r * ld + k] (r < n_rows, k < kc) into panels of nr rows: dst[p][k][nr],
    // zero-filling rows beyond n_rows in the last panel.
    void (*pack_f32)(const float* rows, int64_t ld, int64_t n_rows, int64_t kc, float* dst);
    // Packs into dst[p][kc2][nr][2] bf16 with kc2 = ceil(kc / 2), zero-filling the odd tail.
    void (*pack_bf16)(const uint16_t* rows, int64_t ld, int64_t n_rows, int64_t kc, uint16_t* dst);
    void (*pack_bf16_from_f32)(const float* rows, int64_t ld, int64_t n_rows, int64_t kc,
                               uint16_t* dst);
    // pack_f32 from F16 rows (exact widening, F16C).
    void (*pack_f32_from_f16)(const uint16_t* rows, int64_t ld, int64_t n_rows, int64_t kc,
                              float* dst);
    // Activation micro-panels: tokens x[i * ldx + k] (i < m <= mr, k < K) to dst[k][mr]
    // (f32) or dst[k2][mr] words of two bf16 (rounded to nearest even), zero past m and K.
    void (*pack_a_f32)(const float* x, int64_t ldx, int m, int64_t K, float* dst);
    void (*pack_a_bf16)(const float* x, int64_t ldx, int m, int64_t K, uint32_t* dst);
    // The bf16 packers over transposed sources, for the training GEMMs: tokens at
    // x[k * ldx + i], weight rows at cols[k * ld + r].
    void (*pack_a_bf16_t)(const float* x, int64_t ldx, int m, int64_t K, uint32_t* dst);
    void (*pack_bf16_from_f32_t)(const float* cols, int64_t ld, int64_t n_rows, int64_t kc,
                                 uint16_t* dst);
};

// The table for `isa` (throws Error if this CPU lacks it; Isa::Scalar has no GEMM: empty table).
const GemmKernels& gemm_kernels(Isa isa);

// The panel format the GEMM would use for `type` with `isa` (None: use the vec_dot path).
GemmPanel gemm_panel(DType type, Isa isa);

// The measured choice for quantized and BF16 weights with `isa`: each available panel format
// timed on a Q8_0 matrix (prefill shape) the first time it is asked, the fastest kept and
// remembered for the machine (kernels/kernel_choices.hpp). SYSLM_GEMM_PANEL=f32|bf16|amx-bf16 overrides it (an unavailable format is an error).
struct PanelChoice {
    GemmPanel panel = GemmPanel::F32;
    struct Timing {
        GemmPanel panel;
        double gflops;
    };
    std::vector<Timing> timings;  // of the formats this process timed
    KernelChoice record;          // empty when overridden or when only one format exists
};
const PanelChoice& gemm_panel_choice(Isa isa);

// True where the CPU has AMX-BF16 tiles and the OS granted this process their state.
bool amx_bf16_available();

// y = x W^T (+ bias) through the GEMM with the given panel format; w.type must allow it
// (gemm_panel(w.type, isa) != None, or F32 panels, which every type with to_float supports on
// AVX2 and AVX-512). x: n_tokens rows of w.n_in floats; y: n_tokens rows of w.n_out floats.
void gemm(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
          const float* bias, Isa isa, GemmPanel panel);

// Training GEMMs on bf16 panels (AVX512_BF16): y[t, o] (+)= sum_k x(t, k) w(o, k) for t < T,
// o < N, k < K, with y rows of N floats. Each f32 operand is read as stored (x[t * ld + k],
// w[o * ld + k]) or transposed (x[k * ld + t], w[k * ld + o]) and rounded to bf16 as it is
// packed (nearest even); products accumulate in f32. Covers a linear layer's forward
// (x, w as stored), input gradient (dY as stored, W transposed) and weight gradient (dY and X
// both transposed) without transposed copies. Throws Error where the CPU lacks AVX512_BF16.
struct GemmOperand {
    const float* data;
    int64_t ld;
    bool transposed;
};
bool gemm_bf16_supported();
void gemm_bf16(GemmOperand x, GemmOperand w, int64_t T, int64_t N, int64_t K, float* y,
               bool accumulate, ThreadPool& pool, const float* bias = nullptr);
// The same contract on the AMX tiles (bf16 operands, f32 accumulation); throws Error where
// amx_bf16_available() is false.
void gemm_amx_bf16_operands(GemmOperand x, GemmOperand w, int64_t T, int64_t N, int64_t K,
                            float* y, bool accumulate, ThreadPool& pool,
                            const float* bias = nullptr);
// The same contract in f32 on the f32 panels (exact products, AVX2 or AVX-512): the training
// GEMMs' alternative to the BLAS where that is slower (kernels/cpu/linear_backward.hpp).
bool gemm_f32_supported();
void gemm_f32(GemmOperand x, GemmOperand w, int64_t T, int64_t N, int64_t K, float* y,
              bool accumulate, ThreadPool& pool, const float* bias = nullptr);

namespace x86 {
// Defined in the ISA files.
GemmKernels gemm_kernels_avx2();
GemmKernels gemm_kernels_avx512(bool with_bf16);
void gemm_amx_bf16(const WeightView& w, const float* x, int64_t T, float* y, ThreadPool& pool,
                   const float* bias);
void gemm_amx_bf16_operands(GemmOperand x, GemmOperand w, int64_t T, int64_t N, int64_t K,
                            float* y, bool accumulate, ThreadPool& pool, const float* bias);
}  // namespace x86

}  // namespace syslm::kernels
