// Gradients of a linear layer y = x W^T + b (x: T x K tokens, W: N rows of K, y: T x N), the
// two GEMMs of every linear layer's backward pass:
//   dx = dy W  (or dx += dy W)   (T x K)
//   dW += dy^T x                 (N x K), db += column sums of dy.
// Each reads its operands in place, transposed where needed (no transposed copies).
//
// Which GEMM runs them is measured, per precision, the first time one is asked
// (train_gemm_choice): F32 on the BLAS (OpenBLAS sgemm) or on syslm's f32 panels — OpenBLAS
// 0.3.21 runs its SSE3 "Prescott" kernel on CPUs it does not know (an Emerald Rapids Xeon
// measured ~4x slower than the panels), so neither can be assumed; BF16 on syslm's bf16
// dot-product panels (AVX512_BF16) or on the AMX tiles.
//
// Mixed precision (the *_rounded functions, incl. the forward y = x W^T + b): the same products
// with both operands rounded (nearest even) to bf16 or fp16 and f32 accumulation, as PyTorch's
// autocast computes a matmul. BF16 on CPUs with AVX512_BF16 runs on the chosen bf16 GEMM;
// elsewhere, with `emulate`, and always for FP16 (no FP16 arithmetic on these CPUs) on the f32
// GEMM over rounded copies: the same products (exact in f32), summed in another order. FP16
// rounding overflows to inf above 65504, which is what FP16 training's loss scaling watches for.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/kernel_choices.hpp"

namespace syslm::kernels {

// accumulate: dx += dy W instead of dx = dy W.
void linear_backward_input(const float* dy, const float* w, int64_t T, int64_t K, int64_t N,
                           float* dx, bool accumulate, ThreadPool& pool);
// db may be null (no bias).
void linear_backward_weight(const float* dy, const float* x, int64_t T, int64_t K, int64_t N,
                            float* dw, float* db, ThreadPool& pool);

// The GEMM engines of training, chosen by timing once per machine and remembered
// (kernels/kernel_choices.hpp): the first of each list (blas; bf16 panels) unless another measures
// at least kTrainGemmMargin faster. Engines that time alike (Zen 4: blas and f32 panels both ~100
// GFLOP/s) round the losses differently, and the memory keeps two runs of one command on one
// machine on the same engines. SYSLM_TRAIN_GEMM_F32=blas|f32 and
// SYSLM_TRAIN_GEMM_BF16=bf16|amx-bf16 override the choice (an unavailable engine is an error).
// The values are stored in training checkpoints (train/trainer.cpp): do not renumber.
enum class TrainGemm { None = 0, Blas = 1, F32Panels = 2, BF16Panels = 3, AmxBF16 = 4 };
const char* train_gemm_name(TrainGemm g);
inline constexpr double kTrainGemmMargin = 1.10;
struct TrainGemmChoice {
    TrainGemm f32 = TrainGemm::Blas;
    TrainGemm bf16 = TrainGemm::None;  // None: no bf16 arithmetic, rounded copies on f32
    struct Timing {
        TrainGemm gemm;
        double gflops;  // one thread, the three orientations of a 128 x 512 x 384 layer
    };
    std::vector<Timing> timings;  // of the candidates this process timed
    std::vector<KernelChoice> records;  // f32 then bf16, where there was a choice to make
};
const TrainGemmChoice& train_gemm_choice();
// Fixes the engines train_gemm_choice() gives from now on: a resumed run continues on the ones its
// checkpoint was written with, so it repeats the uninterrupted run bit for bit even where two
// engines time alike and the measurement picks either (Zen 4: blas and f32 both ~100 GFLOP/s).
// Returns false, changing nothing, where one of them is not available on this CPU. Call it
// before the steps that use them, not while they run.
bool pin_train_gemms(TrainGemm f32, TrainGemm bf16);
bool train_gemm_available(TrainGemm g);
// The GFLOP/s train_gemm_choice() measured for g, or measured now (once) where it was not timed.
double train_gemm_gflops(TrainGemm g);
// y[t, o] (+)= sum_k x(t, k) w(o, k) (+ bias[o]) on engine g, gemm.hpp's GemmOperand contract
// (BF16Panels and AmxBF16 round both operands to bf16).
void train_gemm(TrainGemm g, GemmOperand x, GemmOperand w, int64_t T, int64_t N, int64_t K,
                float* y, bool accumulate, ThreadPool& pool, const float* bias = nullptr);

enum class Rounding { BF16, F16 };
void linear_forward_rounded(Rounding r, const float* x, const float* w, const float* bias,
                            int64_t T, int64_t K, int64_t N, float* y, ThreadPool& pool,
                            bool emulate = false);
void linear_backward_input_rounded(Rounding r, const float* dy, const float* w, int64_t T,
                                   int64_t K, int64_t N, float* dx, bool accumulate,
                                   ThreadPool& pool, bool emulate = false);
void linear_backward_weight_rounded(Rounding r, const float* dy, const float* x, int64_t T,
                                    int64_t K, int64_t N, float* dw, float* db, ThreadPool& pool,
                                    bool emulate = false);

}  // namespace syslm::kernels
