// What a unit test can check of the bandwidth measurements without comparing one timing with
// another: a finite, positive rate for awkward sizes (not multiples of the vector width, the
// thread count or a page) on both kinds of pages, and never an infinite one for a buffer that
// fits in L1. That the read kernels read every element is checked in peak_kernels_test.cpp
// (their sums against a double-precision sum). How the probe compares with an independent
// STREAM-style loop is a benchmark, not a test (timings on a shared VM drift by tens of percent
// between seconds): bench/profile/bandwidth_bench.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "core/thread_pool.hpp"
#include "profile/memory_bandwidth.hpp"

namespace syslm::profile {
namespace {

TEST(MemoryBandwidth, ReadGivesAFinitePositiveRateOnAwkwardSizes) {
    ThreadPool pool(2);
    for (Pages pages : {Pages::Huge, Pages::Small})
        for (size_t bytes : {size_t{4100}, (size_t{1} << 20) + 12, (size_t{33} << 20) + 20}) {
            const double gbs = measure_read_bandwidth(pool, bytes, 2, pages);
            EXPECT_TRUE(std::isfinite(gbs)) << bytes << " bytes";
            EXPECT_GT(gbs, 0.0) << bytes << " bytes";
        }
}

TEST(MemoryBandwidth, CopyGivesAFinitePositiveRateOnAwkwardSizes) {
    ThreadPool pool(2);
    for (size_t bytes : {size_t{4100}, (size_t{5} << 20) + 36}) {
        const double gbs = measure_copy_bandwidth(pool, bytes, 2);
        EXPECT_TRUE(std::isfinite(gbs)) << bytes << " bytes";
        EXPECT_GT(gbs, 0.0) << bytes << " bytes";
    }
}

}  // namespace
}  // namespace syslm::profile
