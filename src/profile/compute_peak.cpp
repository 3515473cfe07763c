#include "profile/compute_peak.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/profiler.hpp"

namespace syslm::profile {

ComputePeak measure_compute_peak(kernels::PeakKernels::ComputeFn fn, ThreadPool& pool,
                                 double seconds, int passes) {
    SYSLM_CHECK(fn, "measure_compute_peak: no kernel");
    float sink = 0;
    // Calibrate the iteration count on one thread so a run lasts about `seconds`.
    int64_t iters = 1 << 14;
    for (;;) {
        const int64_t t0 = profiler::now_ns();
        fn(iters, &sink);
        const double dt = static_cast<double>(profiler::now_ns() - t0) * 1e-9;
        if (dt > seconds / 8 || iters > (int64_t{1} << 40)) {
            iters = std::max<int64_t>(
                1, static_cast<int64_t>(static_cast<double>(iters) * seconds / dt));
            break;
        }
        iters *= 4;
    }
    ComputePeak peak;
    for (int r = 0; r < passes; ++r) {
        const int64_t t0 = profiler::now_ns();
        const double ops = fn(iters, &sink);
        peak.per_core =
            std::max(peak.per_core, ops / (static_cast<double>(profiler::now_ns() - t0) * 1e-9));
    }
    const int n = pool.size();
    std::vector<double> ops(static_cast<size_t>(n));
    std::vector<float> sinks(static_cast<size_t>(n));
    for (int r = 0; r < passes; ++r) {
        const int64_t t0 = profiler::now_ns();
        pool.parallel_for(n, [&](int64_t lo, int64_t hi, int) {
            for (int64_t i = lo; i < hi; ++i)
                ops[static_cast<size_t>(i)] = fn(iters, &sinks[static_cast<size_t>(i)]);
        });
        const double dt = static_cast<double>(profiler::now_ns() - t0) * 1e-9;
        double total = 0;
        for (double o : ops) total += o;
        peak.all_cores = std::max(peak.all_cores, total / dt);
    }
    volatile float keep = sink;
    (void)keep;
    return peak;
}

}  // namespace syslm::profile
