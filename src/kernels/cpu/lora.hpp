// LoRA's low-rank update of a matmul's output rows, each row with its own adapters (Punica's
// segmented products, on the CPU): y[i] += s B (A x[i]) for every term of row i. One pass over
// the batch on the pool, the rank-r products through the ISA's dot and axpy (the rank is small:
// a handful of dots and axpys per row, where a GEMM per adapter would cost more to dispatch than
// to compute).
#pragma once

#include <cstdint>

#include "core/thread_pool.hpp"

namespace syslm::kernels {

struct LoraTerm {
    const float* a;   // r rows of n_in: A
    const float* bt;  // r rows of n_out: B transposed
    int r;
    float scale;
};

// Row i's terms are terms[start[i] .. start[i + 1]); x: rows x n_in, y: rows x n_out.
void lora_update(const float* x, int64_t n_in, float* y, int64_t n_out, int64_t rows,
                 const int32_t* start, const LoraTerm* terms, ThreadPool& pool);

}  // namespace syslm::kernels
