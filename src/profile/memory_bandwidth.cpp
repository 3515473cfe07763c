#include "profile/memory_bandwidth.hpp"

#include <sys/mman.h>
#include <algorithm>

#include <cstdlib>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "core/profiler.hpp"
#include "kernels/cpu/peak.hpp"

namespace syslm::profile {
namespace {

struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], FreeDeleter>;

// 2 MiB-aligned (so huge pages can back it) and first touched by the thread that will read each
// part.
Buffer make_buffer(ThreadPool& pool, int64_t n, Pages pages) {
    constexpr size_t kAlign = size_t{2} << 20;
    const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + kAlign - 1) / kAlign * kAlign;
    Buffer b(static_cast<float*>(std::aligned_alloc(kAlign, bytes)));
    SYSLM_CHECK(b, "probe: cannot allocate a ", bytes >> 20, " MiB buffer");
    // Where transparent huge pages are opt-in ("madvise"), ask for them; where they are off, this
    // is a no-op and both figures are the same.
    if (pages == Pages::Huge)
        madvise(b.get(), bytes, MADV_HUGEPAGE);
    else
        madvise(b.get(), bytes, MADV_NOHUGEPAGE);
    float* p = b.get();
    pool.parallel_for(n, [p](int64_t lo, int64_t hi, int) {
        for (int64_t i = lo; i < hi; ++i) p[i] = static_cast<float>((i * 7) % 13) * 0.25f - 1.0f;
    });
    return b;
}

// Seconds since t0, at least one clock tick: a buffer that fits in L1 must not give an infinite rate.
double elapsed_s(int64_t t0) {
    return static_cast<double>(std::max<int64_t>(1, profiler::now_ns() - t0)) * 1e-9;
}

}  // namespace

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int passes, Pages pages) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    Buffer buf = make_buffer(pool, n, pages);
    // Every SIMD variant, best kept: the widest loads are not always the fastest stream (on Zen 4
    // with 4 KiB pages, 256-bit loads beat 512-bit ones by ~7%).
    std::vector<const kernels::PeakKernels*> variants;
    for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512})
        if (kernels::isa_supported(isa) &&
            static_cast<int>(isa) <= static_cast<int>(kernels::active_isa()))
            variants.push_back(&kernels::peak_kernels(isa));
    if (variants.empty()) variants.push_back(&kernels::peak_kernels());
    std::vector<float> sums(static_cast<size_t>(pool.size()));
    const float* p = buf.get();
    double best = 1e30;
    for (int r = 0; r < passes; ++r) {
        for (const kernels::PeakKernels* k : variants) {
            const int64_t t0 = profiler::now_ns();
            pool.parallel_for(n, [&](int64_t lo, int64_t hi, int tid) {
                sums[static_cast<size_t>(tid)] += k->read_sum(p + lo, hi - lo);
            });
            best = std::min(best, elapsed_s(t0));
        }
    }
    volatile float sink = 0;
    for (float s : sums) sink = sink + s;
    return static_cast<double>(n) * sizeof(float) / best * 1e-9;
}

double measure_copy_bandwidth(ThreadPool& pool, size_t bytes, int passes, Pages pages) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    Buffer src = make_buffer(pool, n, pages), dst = make_buffer(pool, n, pages);
    const auto& k = kernels::peak_kernels();
    double best = 1e30;
    for (int r = 0; r < passes; ++r) {
        const int64_t t0 = profiler::now_ns();
        pool.parallel_for(n, [&](int64_t lo, int64_t hi, int) {
            k.copy(dst.get() + lo, src.get() + lo, hi - lo);
        });
        best = std::min(best, elapsed_s(t0));
    }
    SYSLM_CHECK(dst[n / 3] == src[n / 3], "probe: the copy kernel did not copy");
    return 2.0 * static_cast<double>(n) * sizeof(float) / best * 1e-9;
}

}  // namespace syslm::profile
