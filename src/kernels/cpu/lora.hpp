// LoRA's low-rank update of matmul outputs, each adapter on its own set of rows (Punica's
// segmented products, on the CPU): y[i] += s B (A x[i]) for every row i of a segment. Segments
// may write different outputs (q, k and v; gate and up) from the same input, so that one call
// and one hand-off to the pool serve every projection reading that input. A segment's rows go in
// groups of up to kLoraRowGroup, each group on one thread, so that an adapter's A and B come from
// memory once per group and each of their vectors is loaded once for the group's rows.
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
    float* y;  // its output: rows of n_out
    int64_t n_out;
};

// x: rows of n_in, read by every segment; mid: scratch of sum(r x n_rows) floats.
void lora_update(const float* x, int64_t n_in, std::span<const LoraSegment> segments, float* mid,
                 ThreadPool& pool);

}  // namespace syslm::kernels
