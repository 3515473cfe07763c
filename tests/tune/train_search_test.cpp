// The training goal's search on a synthetic cost function whose optimum is known: the fastest
// setting over the memory limit and a fast one with another loss curve are passed over, the
// global batch is kept, a faster precision counts only within the user's loss limit, and a
// baseline over the limit is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "tune/train_search.hpp"

namespace syslm::tune {
namespace {

TrainMeasurement synthetic(const TrainSettings& s, int threads) {
    EXPECT_EQ(s.micro_batch * s.accum, 12);  // the global batch never changes
    TrainMeasurement m;
    const double mb = s.micro_batch;
    // Speed rises with the micro-batch up to 6, then falls; recompute costs time.
    m.tokens_per_s = 1000 * (mb <= 6 ? mb / 6 : 6 / mb) *
                     (s.recompute == "none" ? 1.0 : s.recompute == "selective" ? 0.9 : 0.7) *
                     (threads == 2 ? 1.0 : 0.6);
    // Memory grows with the micro-batch, less with recompute.
    m.peak_rss_mib = 100 + mb * (s.recompute == "none" ? 50 : s.recompute == "selective" ? 30 : 10);
    m.losses = {5.0, 4.5, 4.2};
    if (s.micro_batch == 4 && s.recompute == "selective") m.losses[2] += 1e-3;  // not the same
    if (s.micro_batch == 3)
        for (double& l : m.losses) l *= 1 + 1e-7;  // the same curve, summed in another order
    return m;
}

TEST(TrainSearch, FindsTheFastestThatFitsWithTheSameLossCurve) {
    TrainSearchOptions o;
    o.baseline = {12, 1, "full", "f32"};  // fits: 100 + 120 MiB
    o.baseline_threads = 2;
    o.max_threads = 2;
    o.memory_limit_mib = 300;  // micro-batch 6: none 400, selective 280 -> fits; full 160
    o.loss_rtol = loss_order_bound(3, 32000);
    const TrainSearchResult r = search_training(synthetic, o);
    EXPECT_EQ(r.best.settings.micro_batch, 6);
    EXPECT_EQ(r.best.settings.accum, 2);
    EXPECT_EQ(r.best.settings.recompute, "selective");
    EXPECT_EQ(r.best.threads, 2);
    EXPECT_NEAR(r.best.m.tokens_per_s, 900, 1e-9);
    EXPECT_NEAR(r.baseline.m.tokens_per_s, 1000 * 0.5 * 0.7, 1e-9);
    bool over = false, other_curve = false, order_ok = false;
    for (const TrainTrial& t : r.trials) {
        over |= t.settings.micro_batch == 6 && t.settings.recompute == "none" && !t.fits;
        other_curve |= t.settings.micro_batch == 4 && t.settings.recompute == "selective" &&
                       !t.same_curve;
        order_ok |= t.settings.micro_batch == 3 && t.same_curve;
    }
    EXPECT_TRUE(over);
    EXPECT_TRUE(other_curve);
    EXPECT_TRUE(order_ok);
    // 6 divisors x 3 recompute policies x 2 thread counts, the baseline once.
    EXPECT_EQ(r.trials.size(), 36u);
}

// bf16 trials run 1.8x faster and move each step's loss by 2e-3 (relative): passed over without a
// precision limit, or with one below that change; chosen with one above it.
TEST(TrainSearch, SearchesPrecisionOnlyUnderTheUsersLossLimit) {
    auto measure = [](const TrainSettings& s, int threads) {
        TrainMeasurement m = synthetic(s, threads);
        if (s.precision == "bf16") {
            m.tokens_per_s *= 1.8;
            for (double& l : m.losses) l *= 1 + 2e-3;
        }
        return m;
    };
    TrainSearchOptions o;
    o.baseline = {12, 1, "full", "f32"};
    o.baseline_threads = 2;
    o.max_threads = 2;
    o.memory_limit_mib = 300;
    o.loss_rtol = loss_order_bound(3, 32000);
    for (double limit : {0.0, 1e-3, 5e-3}) {
        o.precisions = limit > 0 ? std::vector<std::string>{"f32", "bf16"}
                                 : std::vector<std::string>{};
        o.precision_rtol = limit;
        const TrainSearchResult r = search_training(measure, o);
        EXPECT_EQ(r.best.settings.micro_batch, 6) << limit;
        EXPECT_EQ(r.best.settings.recompute, "selective") << limit;
        EXPECT_EQ(r.best.settings.precision, limit > 2e-3 ? "bf16" : "f32") << limit;
        EXPECT_NEAR(r.best.m.tokens_per_s, limit > 2e-3 ? 900 * 1.8 : 900, 1e-9) << limit;
        EXPECT_EQ(r.trials.size(), limit > 0 ? 72u : 36u) << limit;
        for (const TrainTrial& t : r.trials)
            if (t.settings.precision == "bf16") {
                EXPECT_EQ(t.same_curve, limit > 2e-3) << limit;
            }
    }
}

TEST(TrainSearch, RefusesABaselineOverTheLimit) {
    TrainSearchOptions o;
    o.baseline = {12, 1, "none", "f32"};  // 700 MiB
    o.baseline_threads = 2;
    o.max_threads = 2;
    o.memory_limit_mib = 300;
    EXPECT_THROW(search_training(synthetic, o), Error);
}

TEST(TrainSearch, OrderBoundGrowsWithStepsAndTerms) {
    EXPECT_NEAR(loss_order_bound(4, 32000), 8 * std::sqrt(32000.0) * std::ldexp(1.0, -24), 1e-15);
    EXPECT_LT(loss_order_bound(2, 1000), loss_order_bound(4, 1000));
    EXPECT_EQ(loss_order_bound(1, 1), 1e-6);
}

}  // namespace
}  // namespace syslm::tune
