// Matrix times activations, the workhorse of inference: y[t, o] = sum_i W[o, i] * x[t, i] + b[o].
// W is stored as n_out rows of n_in elements in any type with TypeTraits; activations are
// float32 and are converted to the weight's partner type (vec_dot_type) once per call, then each
// weight row is read once for all tokens.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"
#include "core/thread_pool.hpp"

namespace syslm::kernels {

struct WeightView {
    DType type;
    int64_t n_in;   // row length (ne[0])
    int64_t n_out;  // number of rows
    const void* data;
};

// x: n_tokens rows of w.n_in floats; y: n_tokens rows of w.n_out floats; bias: n_out or null.
void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            const float* bias = nullptr);

}  // namespace syslm::kernels
