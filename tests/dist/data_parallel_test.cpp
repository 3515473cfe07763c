// Data parallel: the bucketed reducer sums every bucket over the group whatever order the
// backward makes them ready in; and training on p ranks with B rows each gives the weights one
// process gets with p x B rows (the check: FP32, 20 steps, 1e-5), with and without
// gradient accumulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "../common/random_model.hpp"
#include "dist/communicator.hpp"
#include "dist/data_parallel.hpp"
#include "io/gguf.hpp"
#include "train/trainer.hpp"

namespace syslm::dist {
namespace {

Communicator& world_comm() {
    static std::unique_ptr<Communicator> w = world();
    return *w;
}

TEST(GradientReducer, SumsEveryBucketInAnyReadyOrder) {
    Communicator& c = world_comm();
    const size_t n = 10007;
    std::vector<GradientReducer::Bucket> buckets;
    for (size_t at = 0; at < n;) {  // uneven bucket sizes, one empty
        const size_t len = buckets.size() == 2 ? 0 : 500 + 397 * buckets.size();
        buckets.push_back({at, std::min(n, at + len)});
        at = buckets.back().end;
    }
    GradientReducer red(c, buckets);
    for (int step = 0; step < 3; ++step) {
        std::vector<float> g(n), want(n, 0.0f);
        for (int r = 0; r < c.size(); ++r) {
            std::mt19937 rng(static_cast<uint32_t>(r * 31 + step));
            std::uniform_real_distribution<float> u(-1, 1);
            for (size_t i = 0; i < n; ++i) {
                const float v = u(rng);
                if (r == c.rank()) g[i] = v;
                want[i] += v;
            }
        }
        red.start(g.data());
        for (size_t b = buckets.size(); b-- > 0;) red.ready(b);  // last first, as a backward does
        red.finish();
        for (size_t i = 0; i < n; ++i) ASSERT_NEAR(g[i], want[i], 1e-5) << i;
    }
    if (c.size() > 1) {
        EXPECT_GT(red.comm_seconds(), 0.0);
    }
    EXPECT_GE(red.overlap(), 0.0);
    EXPECT_LE(red.overlap(), 1.0);
}

struct Run {
    std::vector<float> weights;
    std::vector<double> losses;
};

// Trains `steps` steps on the rows [first, first + rows) of the global batch.
Run train(const std::string& path, const std::vector<int32_t>& ids, int first, int rows, int T,
          int accum, Communicator* dp) {
    const io::GGUFFile file(path);
    train::TrainModel m(file);
    std::vector<int32_t> mine(ids.begin() + static_cast<ptrdiff_t>(first) * (T + 1),
                              ids.begin() + static_cast<ptrdiff_t>(first + rows) * (T + 1));
    train::FixedBatch batch(mine, rows, T);
    train::TrainOptions opt;
    opt.B = rows;
    opt.T = T;
    opt.steps = 20;
    opt.accum = accum;
    opt.clip = 1.0;
    opt.schedule.kind = train::ScheduleKind::Cosine;
    opt.schedule.lr = 3e-3f;
    opt.schedule.warmup = 3;
    opt.data_parallel = dp;
    ThreadPool pool(1);
    train::Trainer t(m, batch, opt, pool);
    Run r;
    while (!t.done()) r.losses.push_back(t.step().loss);
    r.weights.assign(m.params().values(), m.params().values() + m.params().size());
    return r;
}

void check_equivalence(int accum) {
    Communicator& c = world_comm();
    const int p = c.size(), B = 2, T = 11;
    const std::string path = testing::write_test_model(
        "dp_equiv_" + std::to_string(c.rank()), testing::small_model_config("llama", 32, 41));
    std::mt19937 rng(77);
    std::vector<int32_t> ids(static_cast<size_t>(p) * B * (T + 1));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    const Run one = train(path, ids, 0, p * B, T, accum, nullptr);            // 1 process, p x B
    const Run dp = train(path, ids, c.rank() * B, B, T, accum, p > 1 ? &c : nullptr);
    ASSERT_EQ(one.weights.size(), dp.weights.size());
    float worst = 0;
    for (size_t i = 0; i < one.weights.size(); ++i)
        worst = std::max(worst, std::fabs(one.weights[i] - dp.weights[i]));
    EXPECT_LE(worst, 1e-5f) << "largest weight difference after 20 steps";
    for (size_t s = 0; s < one.losses.size(); ++s)
        EXPECT_NEAR(one.losses[s], dp.losses[s], 1e-5 * std::fabs(one.losses[s])) << "step " << s;
    EXPECT_LT(dp.losses.back(), dp.losses.front());
}

TEST(DataParallel, RanksWithBRowsEqualOneProcessWithPTimesBRows) { check_equivalence(1); }
TEST(DataParallel, SameWithGradientAccumulation) { check_equivalence(2); }

}  // namespace
}  // namespace syslm::dist
