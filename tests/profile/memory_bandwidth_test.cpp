// The probe's read bandwidth against an independent STREAM-style read loop written here (plain
// C++ on std::threads, summing 64-bit words, vectorised by the compiler for the baseline ISA):
// on the same kind of pages, the two must agree within 15%: the median ratio of back-to-back
// pairs, so a burst of load from elsewhere on the machine hits both of a pair alike.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/thread_pool.hpp"
#include "profile/memory_bandwidth.hpp"

namespace syslm::profile {
namespace {

double stream_read_gbs(size_t bytes, int threads, bool huge, int passes) {
    constexpr size_t kAlign = size_t{2} << 20;
    const size_t n_bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    auto* buf = static_cast<uint64_t*>(std::aligned_alloc(kAlign, n_bytes));
    madvise(buf, n_bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    const size_t n = n_bytes / sizeof(uint64_t);
    const size_t chunk = (n + threads - 1) / threads;
    std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8);  // a cache line apart
    auto run = [&](bool init) {
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
            ts.emplace_back([&, t] {
                const size_t lo = t * chunk, hi = std::min(n, lo + chunk);
                if (init) {
                    for (size_t i = lo; i < hi; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
                    return;
                }
                uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                size_t i = lo;
                for (; i + 4 <= hi; i += 4) {
                    s0 += buf[i];
                    s1 += buf[i + 1];
                    s2 += buf[i + 2];
                    s3 += buf[i + 3];
                }
                for (; i < hi; ++i) s0 += buf[i];
                sums[static_cast<size_t>(t) * 8] += s0 + s1 + s2 + s3;
            });
        for (auto& t : ts) t.join();
    };
    run(true);
    double best = 1e30;
    for (int p = 0; p < passes; ++p) {
        const auto t0 = std::chrono::steady_clock::now();
        run(false);
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    volatile uint64_t keep = 0;
    for (uint64_t s : sums) keep = keep + s;
    std::free(buf);
    return static_cast<double>(n_bytes) / best * 1e-9;
}

void expect_agreement(Pages pages) {
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    ThreadPool pool(threads);
    constexpr size_t kBytes = size_t{256} << 20;
    // This VM's bandwidth on 4 KiB pages drifts by up to a third between seconds: the best of
    // each over a few rounds once came from different stretches (probe 26.3 against 32.7 GB/s in
    // CI). So each round measures the two back to back, in alternating order, and the median of
    // the rounds' ratios is compared: a slow stretch slows both of a pair alike.
    std::vector<double> ratios;
    double probe = 0, stream = 0;
    for (int round = 0; round < 7; ++round) {
        double p = 0, s = 0;
        if (round % 2 == 0) p = measure_read_bandwidth(pool, kBytes, 4, pages);
        s = stream_read_gbs(kBytes, threads, pages == Pages::Huge, 4);
        if (round % 2 == 1) p = measure_read_bandwidth(pool, kBytes, 4, pages);
        ratios.push_back(p / s);
        probe = std::max(probe, p);
        stream = std::max(stream, s);
    }
    std::nth_element(ratios.begin(), ratios.begin() + 3, ratios.end());
    const double median = ratios[3];
    ::testing::Test::RecordProperty("probe_gbs", std::to_string(probe));
    ::testing::Test::RecordProperty("stream_gbs", std::to_string(stream));
    EXPECT_NEAR(median, 1.0, 0.15) << "median probe / stream " << median << " (best: probe "
                                   << probe << " GB/s, STREAM-style loop " << stream << " GB/s), "
                                   << threads << " threads";
}

TEST(MemoryBandwidth, ReadAgreesWithStreamLoopOnHugePages) {
    expect_agreement(Pages::Huge);
}
TEST(MemoryBandwidth, ReadAgreesWithStreamLoopOnSmallPages) {
    expect_agreement(Pages::Small);
}

TEST(MemoryBandwidth, CopyIsPlausible) {
    ThreadPool pool(2);
    const double copy = measure_copy_bandwidth(pool, size_t{64} << 20, 3);
    EXPECT_GT(copy, 1.0);
    EXPECT_LT(copy, 2000.0);
}

}  // namespace
}  // namespace syslm::profile
