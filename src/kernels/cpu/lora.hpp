// LoRA's low-rank update of a matmul's output rows, each adapter on its own set of rows (Punica's
// segmented products, on the CPU): y[i] += s B (A x[i]) for every row i of a segment. Each
// adapter's A and B are read once per call whatever its number of rows (decode steps spread
// many streams over few adapters, and the adapters together exceed the caches): first every
// (segment, rank) pair's dots with its rows, split over the pool, then the rank-r axpys, the
// pool splitting the output columns so that rows shared by several segments need no locks.
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.hpp"

namespace syslm::kernels {

struct LoraSegment {
    const void* a;   // r rows of n_in: A
    const void* bt;  // r rows of n_out: B transposed
    bool f16;        // a and bt hold f16 values (else f32)
    int r;
    float scale;
    const int64_t* rows;  // the rows of x and y it applies to
    int64_t n_rows;
};

// x: rows x n_in, y: rows x n_out; mid: scratch of sum(r x n_rows) floats.
void lora_update(const float* x, int64_t n_in, float* y, int64_t n_out,
                 std::span<const LoraSegment> segments, float* mid, ThreadPool& pool);

}  // namespace syslm::kernels
