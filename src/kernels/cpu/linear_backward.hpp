// Gradients of a linear layer y = x W^T + b (x: T x K tokens, W: N rows of K, y: T x N), the
// two GEMMs of every linear layer's backward pass:
//   dx = dy W  (or dx += dy W)   (T x K)
//   dW += dy^T x                 (N x K), db += column sums of dy.
// Both are OpenBLAS sgemm calls: it reads either operand transposed in place and accumulates
// into its output, which measured 180-208 GFLOP/s on these shapes here against 128-152 for
// transposed copies fed to syslm's own GEMM (kernels/cpu/gemm.hpp, which only knows y = x W^T).
//
// Mixed precision (the *_rounded functions, incl. the forward y = x W^T + b): the same products
// with both operands rounded (nearest even) to bf16 or fp16 and f32 accumulation, as PyTorch's
// autocast computes a matmul. BF16 on AVX512_BF16 runs on syslm's bf16 GEMM (gemm_bf16: operands
// read in place, transposed where needed, ~1.5-2x sgemm here); elsewhere, with `emulate`, and
// always for FP16 (no FP16 arithmetic on these CPUs) on the f32 GEMMs over rounded copies: the
// same products (exact in f32), summed in another order. FP16 rounding overflows to inf above
// 65504, which is what FP16 training's loss scaling watches for.
#pragma once

#include <cstdint>

#include "core/thread_pool.hpp"

namespace syslm::kernels {

// accumulate: dx += dy W instead of dx = dy W.
void linear_backward_input(const float* dy, const float* w, int64_t T, int64_t K, int64_t N,
                           float* dx, bool accumulate, ThreadPool& pool);
// db may be null (no bias).
void linear_backward_weight(const float* dy, const float* x, int64_t T, int64_t K, int64_t N,
                            float* dw, float* db, ThreadPool& pool);

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
