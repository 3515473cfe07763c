// Gradients of a linear layer y = x W^T + b (x: T x K tokens, W: N rows of K, y: T x N), the
// two GEMMs of every linear layer's backward pass:
//   dx = dy W        (T x K)
//   dW += dy^T x     (N x K), db += column sums of dy.
// Both run on the forward's matmul (kernels/cpu/matmul.hpp: the packed GEMM from 32 rows) over
// transposed copies of one operand each, held in per-thread scratch: the transposes read and
// write each element once, against 2 T N K operations of the product.
#pragma once

#include <cstdint>

#include "core/thread_pool.hpp"

namespace syslm::kernels {

void linear_backward_input(const float* dy, const float* w, int64_t T, int64_t K, int64_t N,
                           float* dx, ThreadPool& pool);
// db may be null (no bias).
void linear_backward_weight(const float* dy, const float* x, int64_t T, int64_t K, int64_t N,
                            float* dw, float* db, ThreadPool& pool);

// dst[c * rows + r] = src[r * cols + c]: rows x cols -> cols x rows.
void transpose(const float* src, int64_t rows, int64_t cols, float* dst, ThreadPool& pool);

}  // namespace syslm::kernels
