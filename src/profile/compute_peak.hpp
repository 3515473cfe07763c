// Arithmetic peaks measured with the peak micro-kernels (kernels/cpu/peak.hpp): one core alone,
// then every thread of a pool at once (cores may share power or execution units).
#pragma once

#include "core/thread_pool.hpp"
#include "kernels/cpu/peak.hpp"

namespace syslm::profile {

struct ComputePeak {
    double per_core = 0;   // operations per second (a multiply-add counts 2), one thread
    double all_cores = 0;  // the pool's threads together
};

// Best of `passes` runs of about `seconds` each. fn must not be null.
ComputePeak measure_compute_peak(kernels::PeakKernels::ComputeFn fn, ThreadPool& pool,
                                 double seconds = 0.05, int passes = 3);

}  // namespace syslm::profile
