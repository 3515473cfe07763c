#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/thread_pool.hpp"

namespace syslm {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
    for (int threads : {1, 2, 3, 5}) {
        ThreadPool pool(threads);
        for (int64_t n : {1, 2, 7, 1000, 1001}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            for (int rep = 0; rep < 20; ++rep)
                pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
                    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
                });
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 20) << threads << " " << n;
        }
    }
}

TEST(ThreadPool, RethrowsWorkerExceptions) {
    ThreadPool pool(3);
    EXPECT_THROW(pool.parallel_for(9,
                                   [](int64_t b, int64_t, int) {
                                       if (b > 0) throw std::runtime_error("boom");
                                   }),
                 std::runtime_error);
    std::atomic<int> ok = 0;  // still usable afterwards
    pool.parallel_for(9, [&](int64_t b, int64_t e, int) { ok += static_cast<int>(e - b); });
    EXPECT_EQ(ok.load(), 9);
}

}  // namespace
}  // namespace syslm
