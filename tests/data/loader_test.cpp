// The batch loader: windows hold the right tokens, each window is visited once per epoch in a
// seeded order, a saved position resumes the identical batch sequence, the prefetch thread stops
// cleanly and its errors reach next(), tokens outside the model's vocabulary are caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <set>

#include "core/error.hpp"
#include "data/loader.hpp"
#include "test_util.hpp"

namespace syslm::data {
namespace {

using test::fresh_dir;
using test::opts;

// Shards whose token at position i of shard k is k * 100000 + i: every token says where it is.
std::vector<std::string> position_shards(const std::string& dir, std::vector<size_t> sizes) {
    std::vector<std::string> paths;
    for (size_t k = 0; k < sizes.size(); ++k) {
        std::vector<uint32_t> t(sizes[k]);
        for (size_t i = 0; i < t.size(); ++i) t[i] = uint32_t(k * 100000 + i);
        paths.push_back(dir + "/train_" + std::to_string(k) + ".bin");
        write_shard(paths.back(), t, TokenDType::U32);
    }
    return paths;
}

std::vector<std::vector<int32_t>> take(BatchLoader& l, int n) {
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < n; ++i) out.push_back(l.next().tokens);
    return out;
}

TEST(EpochOrder, IsASeededPermutation) {
    for (uint64_t n : {1u, 2u, 7u, 1000u}) {
        const auto a = epoch_order(42, 0, n);
        auto sorted = a;
        std::sort(sorted.begin(), sorted.end());
        std::vector<uint32_t> iota(n);
        std::iota(iota.begin(), iota.end(), 0u);
        EXPECT_EQ(sorted, iota);
        EXPECT_EQ(epoch_order(42, 0, n), a);  // deterministic
        if (n >= 7) {
            EXPECT_NE(epoch_order(42, 1, n), a);  // another epoch, another order
            EXPECT_NE(epoch_order(43, 0, n), a);  // another seed, another order
            EXPECT_NE(a, iota);                   // shuffled at all
        }
    }
    // Pinned: the documented algorithm (loader.hpp), computed independently in Python, so the
    // order is the same on every platform and build, and a reference run can reproduce it.
    EXPECT_EQ(epoch_order(1234, 5, 10), (std::vector<uint32_t>{4, 8, 9, 6, 2, 3, 1, 0, 5, 7}));
    EXPECT_EQ(epoch_order(0, 0, 12), (std::vector<uint32_t>{2, 0, 9, 8, 10, 4, 1, 6, 5, 3, 11, 7}));
}

TEST(WindowIndex, WindowsStayInsideShards) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {10, 3, 17});
    const ShardSet set(paths);
    // len 4, stride 3: shard 0 -> starts 0,3,6 (3); shard 1 -> none; shard 2 -> 0,3,...,12 (5).
    const WindowIndex w(set, 4, 3);
    ASSERT_EQ(w.size(), 8u);
    EXPECT_EQ(w.locate(0), (std::pair<size_t, uint64_t>{0, 0}));
    EXPECT_EQ(w.locate(2), (std::pair<size_t, uint64_t>{0, 6}));
    EXPECT_EQ(w.locate(3), (std::pair<size_t, uint64_t>{2, 0}));
    EXPECT_EQ(w.locate(7), (std::pair<size_t, uint64_t>{2, 12}));
    EXPECT_THROW(w.locate(8), Error);
    EXPECT_THROW(WindowIndex(set, 18, 1), Error);  // longer than every shard
}

TEST(BatchLoader, RowsHoldTheirWindowsTokens) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {100, 37, 64});
    BatchLoader l(paths, opts(3, 8, 7));
    const ShardSet set(paths);
    const WindowIndex w(set, 9, 8);
    EXPECT_EQ(l.n_windows(), w.size());
    for (int i = 0; i < 20; ++i) {
        const Batch& b = l.next();
        ASSERT_EQ(b.tokens.size(), 3u * 9u);
        for (int r = 0; r < 3; ++r) {
            const auto [k, first] = w.locate(b.window[r]);
            for (int j = 0; j < 9; ++j)
                ASSERT_EQ(b.row(r)[j], int32_t(k * 100000 + first + j)) << "batch " << i;
        }
    }
}

TEST(BatchLoader, DeterministicForASeed) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {500, 333});
    const LoaderOptions opt = opts(4, 16, 123);
    BatchLoader a(paths, opt), b(paths, opt);
    EXPECT_EQ(take(a, 40), take(b, 40));  // several epochs (51 windows)
    LoaderOptions other = opt;
    other.seed = 124;
    BatchLoader c(paths, other);
    BatchLoader d(paths, opt);
    EXPECT_NE(take(c, 5), take(d, 5));
}

TEST(BatchLoader, EachWindowOncePerEpoch) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {300, 41, 250});
    // B = 7 does not divide the window count, so batches straddle epochs.
    BatchLoader l(paths, opts(7, 10, 5));
    const uint64_t n = l.n_windows();
    ASSERT_EQ(n, 29u + 4u + 24u);
    std::vector<uint64_t> stream;
    LoaderPosition expect_pos;
    while (stream.size() < 4 * n) {
        EXPECT_EQ(l.position(), expect_pos);
        const Batch& b = l.next();
        EXPECT_EQ(b.start, expect_pos);
        stream.insert(stream.end(), b.window.begin(), b.window.end());
        expect_pos = {stream.size() / n, stream.size() % n};
        EXPECT_EQ(b.end, expect_pos);
    }
    for (uint64_t e = 0; e < 4; ++e) {
        std::vector<uint64_t> epoch(stream.begin() + e * n, stream.begin() + (e + 1) * n);
        const auto order = epoch_order(5, e, n);
        EXPECT_TRUE(std::equal(epoch.begin(), epoch.end(), order.begin())) << "epoch " << e;
        std::sort(epoch.begin(), epoch.end());
        for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(epoch[i], i) << "epoch " << e;
    }
}

TEST(BatchLoader, StrideOneUsesEveryStart) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {20});
    BatchLoader l(paths, opts(2, 4, 1, 0, 1));
    EXPECT_EQ(l.n_windows(), 16u);
}

TEST(BatchLoader, RestoreGivesTheIdenticalSequence) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {400, 123});
    const LoaderOptions opt = opts(5, 12, 99);
    for (int skip : {0, 1, 7, 8, 9, 23}) {  // 43 windows: the 9th batch straddles epochs
        SCOPED_TRACE(skip);
        BatchLoader a(paths, opt);
        take(a, skip);
        const LoaderPosition pos = a.position();
        const auto expected = take(a, 20);

        BatchLoader b(paths, opt, pos);  // a fresh process resuming
        EXPECT_EQ(b.position(), pos);
        EXPECT_EQ(take(b, 20), expected);
        EXPECT_EQ(b.fingerprint(), a.fingerprint());

        a.seek(pos);  // the same loader going back
        EXPECT_EQ(take(a, 20), expected);
    }
    BatchLoader l(paths, opt);
    EXPECT_THROW(l.seek({0, l.n_windows()}), Error);
    EXPECT_THROW(BatchLoader(paths, opt, {3, 1000}), Error);
}

TEST(BatchLoader, FingerprintTracksDataAndLayout) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {400, 123});
    const uint64_t f = BatchLoader(paths, opts(2, 12, 1)).fingerprint();
    EXPECT_EQ(BatchLoader(paths, opts(3, 12, 1)).fingerprint(), f);
    EXPECT_NE(BatchLoader(paths, opts(2, 13, 1)).fingerprint(), f);
    EXPECT_NE(BatchLoader(paths, opts(2, 12, 2)).fingerprint(), f);
    write_shard(paths[1], std::vector<uint32_t>(123, 5), TokenDType::U32);
    EXPECT_NE(BatchLoader(paths, opts(2, 12, 1)).fingerprint(), f);
}

TEST(BatchLoader, ShutsDownCleanly) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {1000});
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) {
        BatchLoader l(paths, opts(2, 8, uint64_t(i)));
        // Destroyed with the thread blocked on a full ring, mid-way, or not yet started.
        for (int k = 0; k < i % 4; ++k) l.next();
        if (i % 5 == 0) l.seek({1, 3});
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
}

TEST(BatchLoader, WaitTimeIsRecorded) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {5000});
    BatchLoader l(paths, opts(8, 32, 3));
    double sum = 0;
    for (int i = 0; i < 50; ++i) {
        l.next();
        EXPECT_GE(l.last_wait_s(), 0.0);
        sum += l.last_wait_s();
    }
    EXPECT_DOUBLE_EQ(l.waited_s(), sum);
}

TEST(BatchLoader, VocabularyMismatchIsCaughtAtOpen) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {50, 50});  // largest token 100049
    try {
        BatchLoader l(paths, opts(1, 4, 1, 100000));
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(paths[1]), std::string::npos) << msg;
        EXPECT_NE(msg.find("token 0 is 100000"), std::string::npos) << msg;
        EXPECT_NE(msg.find("vocabulary of 100000"), std::string::npos) << msg;
    }
    EXPECT_NO_THROW(BatchLoader(paths, opts(1, 4, 1, 100050)));
}

TEST(BatchLoader, ThreadErrorsAreRethrownFromNext) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {64, 64});
    // Not verified at open, so the bad tokens (shard 1: 100000...) are found by the thread.
    BatchLoader l(paths, opts(4, 7, 2, 1000, 0, false));
    bool thrown = false;
    for (int i = 0; i < 8 && !thrown; ++i) {
        try {
            const Batch& b = l.next();
            for (int32_t t : b.tokens) ASSERT_LT(t, 1000);  // what does arrive is good
        } catch (const Error& e) {
            thrown = true;
            const std::string msg = e.what();
            EXPECT_NE(msg.find(paths[1]), std::string::npos) << msg;
            EXPECT_NE(msg.find("outside the vocabulary of 1000"), std::string::npos) << msg;
        }
    }
    EXPECT_TRUE(thrown);
    EXPECT_THROW(l.next(), Error);  // stays failed; the destructor still joins
}

TEST(BatchLoader, BadShapesAndDataAreErrors) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {10});
    EXPECT_THROW(BatchLoader(paths, opts(0, 4, 0)), Error);
    EXPECT_THROW(BatchLoader(paths, opts(1, 0, 0)), Error);
    EXPECT_THROW(BatchLoader(paths, opts(1, 10, 0)), Error);  // 11 > 10 tokens
    EXPECT_THROW(BatchLoader({}, opts(1, 4, 0)), Error);
    write_shard(dir + "/empty.bin", {}, TokenDType::U16);
    EXPECT_THROW(BatchLoader({dir + "/empty.bin"}, opts(1, 4, 0)), Error);
}

TEST(BatchLoader, SmallerDataThanABatchStillWorks) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {13});  // 3 windows of 5 every 4
    BatchLoader l(paths, opts(8, 4, 11));
    ASSERT_EQ(l.n_windows(), 3u);
    const Batch& b = l.next();
    std::map<uint64_t, int> seen;
    for (uint64_t w : b.window) ++seen[w];
    EXPECT_EQ(seen.size(), 3u);  // 8 rows = epochs 0, 1 whole and 2 of epoch 2
    EXPECT_EQ(b.end, (LoaderPosition{2, 2}));
}

TEST(SequentialLoader, ReadsEveryWindowInOrder) {
    const std::string dir = fresh_dir();
    const auto paths = position_shards(dir, {50, 20});
    SequentialLoader v(paths, 3, 8);  // windows of 9 every 8: 6 + 2
    ASSERT_EQ(v.n_windows(), 8u);
    std::vector<int32_t> out;
    std::vector<int32_t> firsts;
    for (int rows; (rows = v.next(out)) > 0;) {
        ASSERT_EQ(out.size(), size_t(rows) * 9);
        for (int r = 0; r < rows; ++r) {
            for (int j = 1; j < 9; ++j) ASSERT_EQ(out[r * 9 + j], out[r * 9] + j);
            firsts.push_back(out[r * 9]);
        }
    }
    EXPECT_EQ(firsts, (std::vector<int32_t>{0, 8, 16, 24, 32, 40, 100000, 100008}));
    EXPECT_EQ(v.next(out), 0);
    v.reset();
    EXPECT_EQ(v.next(out), 3);
    EXPECT_EQ(out[0], 0);
}

}  // namespace
}  // namespace syslm::data
