// Short causal depthwise convolution over positions (conv + attention hybrids: the attention
// norm's output mixed with its last k - 1 predecessors, channel by channel, before Q/K/V):
//   out[t][c] = sum_{j < k} w[j][c] a[t - j][c],  a[t - j] = 0 before the sequence starts.
// w holds k rows of `dim` floats (row j: the taps of lag j). Training runs B sequences of T
// rows; inference gathers the lagged rows from its KV store instead (model/transformer.cpp).
#pragma once

#include <cstdint>

#include "core/thread_pool.hpp"

namespace syslm::kernels {

// out (B x T x dim) from a (B x T x dim); out must not alias a.
void causal_conv(const float* a, const float* w, int k, int64_t B, int64_t T, int64_t dim,
                 float* out, ThreadPool& pool);
// From dout: da (overwritten) and dw (k x dim, added).
void causal_conv_backward(const float* a, const float* w, const float* dout, int k, int64_t B,
                          int64_t T, int64_t dim, float* da, float* dw, ThreadPool& pool);

}  // namespace syslm::kernels
