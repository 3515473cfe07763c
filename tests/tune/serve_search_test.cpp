// The serve goal's runtime search on a synthetic cost function whose optimum is known (separable
// in the knobs, with a latency limit that rules out the unconstrained best and a setting that
// fails to run), and the load generator on a real engine: every request generates its tokens and
// the latency figures are ordered.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "../common/random_model.hpp"
#include "core/error.hpp"
#include "tune/serve_search.hpp"

namespace syslm::tune {
namespace {

// tokens/s = product of one factor per knob. Unconstrained best: threads 2, token budget 2048,
// parallel 8, page 32, f32; budget 2048 breaks the TTFT limit, page 64 fails to run.
ServeMeasurement synthetic(const ServeSettings& s, int threads) {
    const std::map<int64_t, double> budget = {{64, 0.5}, {128, 0.7}, {256, 0.9}, {512, 1.0},
                                              {1024, 1.3}, {2048, 1.5}};
    const std::map<int, double> parallel = {{4, 0.6}, {8, 1.2}, {16, 1.0}};
    const std::map<int, double> page = {{8, 0.9}, {16, 1.0}, {32, 1.1}};
    const std::map<int, double> thread = {{1, 0.7}, {2, 1.25}, {4, 1.0}};
    if (s.page_size == 64) fail("page 64: not enough KV pages");
    ServeMeasurement m;
    m.tokens_per_s = 100 * budget.at(s.token_budget) * parallel.at(s.parallel) *
                     page.at(s.page_size) * thread.at(threads) * (s.cache_type == "f32" ? 1.05 : 1);
    m.ttft_p99 = s.token_budget > 1024 ? 5.0 : 0.5;
    m.itl_p99 = 0.05;
    return m;
}

TEST(ServeSearch, FindsTheKnownOptimumWithinTheLimits) {
    ServeSearchOptions o;
    o.streams = 16;
    o.max_threads = 4;
    o.max_ttft_p99 = 1.0;
    int calls = 0;
    const ServeSearchResult r = search_serving(
        [&](const ServeSettings& s, int t, bool) { ++calls; return synthetic(s, t); }, o);
    EXPECT_EQ(r.best.threads, 2);
    EXPECT_EQ(r.best.settings.token_budget, 1024);
    EXPECT_EQ(r.best.settings.parallel, 8);
    EXPECT_EQ(r.best.settings.page_size, 32);
    EXPECT_EQ(r.best.settings.cache_type, "f32");
    EXPECT_TRUE(r.best.meets_limits);
    EXPECT_EQ(r.baseline.settings, ServeSettings{});
    EXPECT_EQ(r.baseline.threads, 4);
    const double expect = 100 * 1.3 * 1.2 * 1.1 * 1.25 * 1.05;
    EXPECT_NEAR(r.best.m.tokens_per_s, expect, 1e-9 * expect);
    EXPECT_NEAR(r.baseline.m.tokens_per_s, 100.0, 1e-9);
    bool failed_seen = false, over_limit_seen = false;
    for (const ServeTrial& t : r.trials) {
        failed_seen |= !t.error.empty() && t.settings.page_size == 64;
        over_limit_seen |= t.error.empty() && !t.meets_limits && t.settings.token_budget == 2048;
        if (t.meets_limits) {
            EXPECT_LE(t.m.tokens_per_s, expect * (1 + 1e-12)) << "the search missed the best";
        }
    }
    EXPECT_TRUE(failed_seen);
    EXPECT_TRUE(over_limit_seen);
    // Every distinct setting measured once in the search, then 2 x 3 confirmations.
    EXPECT_EQ(calls, static_cast<int>(r.trials.size()) + 6);
}

TEST(ServeSearch, KeepsTheDefaultWhenNothingBeatsIt) {
    ServeSearchOptions o;
    o.streams = 4;
    o.max_threads = 2;
    const ServeSearchResult r = search_serving(
        [](const ServeSettings& s, int t, bool) {
            ServeMeasurement m;
            m.tokens_per_s = s == ServeSettings{} && t == 2 ? 50 : 40;
            return m;
        },
        o);
    EXPECT_EQ(r.best.settings, ServeSettings{});
    EXPECT_EQ(r.best.threads, 2);
    EXPECT_EQ(r.best.m.tokens_per_s, 50);
}

TEST(ServeLoad, EveryRequestGeneratesItsTokens) {
    const auto c = testing::small_model_config("llama", 256, 41);
    auto model = std::make_shared<const model::Model>(testing::write_test_model("serve_load", c));
    const auto tok = tokenizer::Tokenizer::from_gguf(model->file());
    std::vector<int32_t> text;
    for (int i = 0; i < 700; ++i) text.push_back(3 + (i * 37) % 500);
    ServeLoad load;
    load.streams = 5;
    load.requests_per_stream = 3;
    load.max_tokens = 7;
    load.prompts = cut_prompts(text, 9, 64);
    ASSERT_EQ(load.prompts.size(), 9u);
    EXPECT_EQ(load.prompts[0].size(), 8u);
    EXPECT_EQ(load.prompts[3].size(), 64u);
    infer::EngineConfig ec;
    ec.threads = 2;
    ec.parallel = 3;  // fewer slots than streams: some wait
    ec.token_budget = 40;
    ec.n_ctx = 128;
    const ServeMeasurement m = measure_serving(model, tok, ec, load);
    EXPECT_EQ(m.generated, 5 * 3 * 7);
    EXPECT_GT(m.tokens_per_s, 0);
    EXPECT_GT(m.ttft_p50, 0);
    EXPECT_LE(m.ttft_p50, m.ttft_p99);
    EXPECT_LE(m.itl_p50, m.itl_p99);
    EXPECT_LE(m.ttft_p99, m.seconds);
    EXPECT_THROW(cut_prompts(std::vector<int32_t>(20, 5), 4, 64), Error);
}

}  // namespace
}  // namespace syslm::tune
