// Collectives of the world's communicator against the results computed locally (every rank can
// generate every rank's data from its seed), on awkward sizes, and their byte counts against the
// ring formulas. Runs under mpirun with 1, 2 and 3 ranks (tests/CMakeLists.txt), and without MPI
// on the single-rank world.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "parallel/communicator.hpp"
#include "world.hpp"
#include "parallel/self_communicator.hpp"

namespace syslm::parallel {
namespace {

std::vector<float> data_of(int rank, size_t n, uint32_t salt) {
    std::mt19937 rng(1000u * static_cast<uint32_t>(rank) + salt);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

TEST(Communicator, AllReduceSumsEveryRanksBuffer) {
    Communicator& c = world_comm();
    const int p = c.size();
    for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{100003}}) {
        std::vector<float> mine = data_of(c.rank(), n, static_cast<uint32_t>(n));
        c.reset_stats();
        c.all_reduce_sum(mine.data(), n);
        std::vector<double> want(n, 0.0);
        for (int r = 0; r < p; ++r) {
            const std::vector<float> v = data_of(r, n, static_cast<uint32_t>(n));
            for (size_t i = 0; i < n; ++i) want[i] += v[i];
        }
        for (size_t i = 0; i < n; ++i) ASSERT_NEAR(mine[i], want[i], 1e-5) << i;
        EXPECT_EQ(c.stats(Collective::AllReduce).calls, 1u);
        EXPECT_EQ(c.stats(Collective::AllReduce).bytes,
                  p == 1 ? 0u : 2u * n * 4u * (p - 1) / p);
    }
    double d[2] = {0.5 * c.rank(), 1.0};
    c.all_reduce_sum(d, 2);
    EXPECT_DOUBLE_EQ(d[0], 0.25 * p * (p - 1));
    EXPECT_DOUBLE_EQ(d[1], p);
}

TEST(Communicator, ReduceScatterAndAllGatherAreEachOthersHalves) {
    Communicator& c = world_comm();
    const int p = c.size();
    const size_t n = 1031;  // per rank
    const std::vector<float> in = data_of(c.rank(), n * p, 7);
    std::vector<float> part(n);
    c.reduce_scatter_sum(in.data(), part.data(), n);
    std::vector<double> want(n, 0.0);
    for (int r = 0; r < p; ++r) {
        const std::vector<float> v = data_of(r, n * p, 7);
        for (size_t i = 0; i < n; ++i) want[i] += v[c.rank() * n + i];
    }
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(part[i], want[i], 1e-5) << i;
    std::vector<float> all(n * p);
    c.all_gather(part.data(), all.data(), n);
    // all-gather after reduce-scatter is an all-reduce.
    std::vector<float> reduced = in;
    c.all_reduce_sum(reduced.data(), reduced.size());
    for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], reduced[i], 1e-5) << i;
    EXPECT_EQ(c.stats(Collective::AllGather).bytes, p == 1 ? 0u : n * p * 4u * (p - 1) / p);
}

TEST(Communicator, BroadcastSendRecvAndSplit) {
    Communicator& c = world_comm();
    const int p = c.size();
    std::vector<float> v = data_of(c.rank(), 333, 3);
    c.broadcast(v.data(), v.size() * sizeof(float), p - 1);
    EXPECT_EQ(v, data_of(p - 1, 333, 3));
    if (p > 1) {  // a ring: send to the next, receive from the previous
        const int next = (c.rank() + 1) % p, prev = (c.rank() + p - 1) % p;
        std::vector<float> out = data_of(c.rank(), 77, 9), got(77);
        if (c.rank() % 2 == 0) {
            c.send(out.data(), out.size() * 4, next, 5);
            c.recv(got.data(), got.size() * 4, prev, 5);
        } else {
            c.recv(got.data(), got.size() * 4, prev, 5);
            c.send(out.data(), out.size() * 4, next, 5);
        }
        EXPECT_EQ(got, data_of(prev, 77, 9));
    }
    EXPECT_THROW(c.send(v.data(), 4, c.rank(), 0), Error);  // to itself
    // Even and odd ranks: two groups, ordered by rank.
    std::unique_ptr<Communicator> g = c.split(c.rank() % 2, c.rank());
    EXPECT_EQ(g->size(), (p - c.rank() % 2 + 1) / 2);
    EXPECT_EQ(g->rank(), c.rank() / 2);
    double s = c.rank();
    g->all_reduce_sum(&s, 1);
    double want = 0;
    for (int r = c.rank() % 2; r < p; r += 2) want += r;
    EXPECT_DOUBLE_EQ(s, want);
    c.barrier();
}

TEST(SelfCommunicator, IsAWorldOfOne) {
    SelfCommunicator c;
    std::vector<float> v = data_of(0, 10, 1), w(10);
    const std::vector<float> v0 = v;
    c.all_reduce_sum(v.data(), v.size());
    EXPECT_EQ(v, v0);
    c.reduce_scatter_sum(v.data(), w.data(), 10);
    EXPECT_EQ(w, v0);
    EXPECT_EQ(c.bytes_sent(), 0u);
    EXPECT_THROW(c.send(v.data(), 4, 1, 0), Error);
    EXPECT_EQ(c.split(3, 0)->size(), 1);
}

}  // namespace
}  // namespace syslm::parallel
