// The probe's read bandwidth against an independent STREAM-style read loop (plain C++ on
// std::threads summing 64-bit words, vectorised by the compiler for the baseline ISA), on huge
// and on 4 KiB pages. Prints both figures and their ratio per round and the median ratio.
//
//   build-bench/bench/syslm_bandwidth_bench [MiB=512] [rounds=7]
//
// This is a benchmark, not a test: on a shared VM the two drift apart by tens of percent between
// seconds, and a baseline-ISA loop is not a memory-bound reader on every CPU (on an Intel Xeon
// with AMX the probe's AVX-512 loads measured 1.5x the loop, both on buffers within a 300 MiB
// L3). Each round measures the two back to back, in alternating order, so a slow stretch of the
// machine slows both of a pair alike; the median of the rounds' ratios is the figure to read.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.hpp"
#include "profile/memory_bandwidth.hpp"

namespace {

double stream_read_gbs(size_t bytes, int threads, bool huge, int passes) {
    constexpr size_t kAlign = size_t{2} << 20;
    const size_t n_bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    auto* buf = static_cast<uint64_t*>(std::aligned_alloc(kAlign, n_bytes));
    if (!buf) {
        std::fprintf(stderr, "cannot allocate %zu MiB\n", n_bytes >> 20);
        std::exit(1);
    }
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

}  // namespace

int main(int argc, char** argv) {
    using namespace syslm::profile;
    const size_t mib = argc > 1 ? std::stoul(argv[1]) : 512;
    const int rounds = argc > 2 ? std::max(1, std::stoi(argv[2])) : 7;
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    syslm::ThreadPool pool(threads);
    std::printf("%zu MiB, %d threads, best of 4 passes per measurement\n", mib, threads);
    for (Pages pages : {Pages::Huge, Pages::Small}) {
        const char* name = pages == Pages::Huge ? "huge pages" : "4 KiB pages";
        std::vector<double> ratios;
        for (int round = 0; round < rounds; ++round) {
            double p = 0, s = 0;
            if (round % 2 == 0) p = measure_read_bandwidth(pool, mib << 20, 4, pages);
            s = stream_read_gbs(mib << 20, threads, pages == Pages::Huge, 4);
            if (round % 2 == 1) p = measure_read_bandwidth(pool, mib << 20, 4, pages);
            ratios.push_back(p / s);
            std::printf("  %-11s round %d: probe %6.1f GB/s, STREAM-style loop %6.1f GB/s, "
                        "ratio %.3f\n", name, round, p, s, p / s);
        }
        std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
        std::printf("%-11s median probe / STREAM-style loop: %.3f\n", name,
                    ratios[ratios.size() / 2]);
    }
    return 0;
}
