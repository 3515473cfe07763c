#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "infer/sampler.hpp"

namespace syslm::infer {
namespace {

std::vector<float> random_logits(int n, uint64_t seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> d(0.0f, 2.0f);
    std::vector<float> l(n);
    for (auto& x : l) x = d(rng);
    return l;
}

SamplingParams plain(float temp) {
    SamplingParams p;
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

TEST(Sampler, GreedyPicksArgmax) {
    const auto l = random_logits(1037, 1);
    Sampler s(plain(0.0f));
    EXPECT_EQ(s.sample(l), std::max_element(l.begin(), l.end()) - l.begin());
}

TEST(Sampler, SameSeedSameTokens) {
    const auto l = random_logits(503, 2);
    SamplingParams p;  // defaults: top-k, top-p, min-p all on
    p.seed = 1234;
    Sampler a(p), b(p);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(a.sample(l), b.sample(l));
    p.seed = 1235;
    Sampler c(p), d(p);
    int differ = 0;
    for (int i = 0; i < 200; ++i) differ += a.sample(l) != c.sample(l);
    EXPECT_GT(differ, 0);
}

// With no truncation the empirical frequencies follow softmax(logits / T).
TEST(Sampler, FrequenciesFollowSoftmax) {
    const std::vector<float> l = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.3f, 0.7f};
    const float temp = 0.7f;
    SamplingParams p = plain(temp);
    p.seed = 42;
    Sampler s(p);
    const int draws = 60000;
    std::vector<int> count(l.size());
    for (int i = 0; i < draws; ++i) ++count[s.sample(l)];
    double z = 0;
    for (float x : l) z += std::exp(x / temp);
    for (size_t i = 0; i < l.size(); ++i) {
        const double expect = std::exp(l[i] / temp) / z;
        const double sd = std::sqrt(expect * (1 - expect) / draws);
        EXPECT_NEAR(count[i] / double(draws), expect, 5 * sd + 1e-4) << "token " << i;
    }
}

TEST(Sampler, TopKTopPMinPTruncate) {
    const std::vector<float> l = {3.0f, 2.9f, 1.0f, 0.5f, -2.0f, -4.0f};
    {  // top-k 2: only the two best ever come out
        SamplingParams p = plain(1.5f);
        p.top_k = 2;
        Sampler s(p);
        for (int i = 0; i < 2000; ++i) ASSERT_LT(s.sample(l), 2);
    }
    {  // top-p: p(0)+p(1) ~ 0.81 at T=1 -> 0.8 keeps exactly tokens 0 and 1
        SamplingParams p = plain(1.0f);
        p.top_p = 0.8f;
        Sampler s(p);
        std::map<int, int> seen;
        for (int i = 0; i < 4000; ++i) ++seen[s.sample(l)];
        EXPECT_EQ(seen.size(), 2u);
    }
    {  // min-p 0.2: tokens with p < 0.2 * p_max are dropped (token 2: e^-2 = 0.135 of the max)
        SamplingParams p = plain(1.0f);
        p.min_p = 0.2f;
        Sampler s(p);
        for (int i = 0; i < 4000; ++i) ASSERT_LT(s.sample(l), 2);
    }
}

TEST(Sampler, PenaltiesFollowLlamaCppFormula) {
    // Token 0 leads by 0.5; a repeat penalty of 1.5 divides its positive logit (3 -> 2).
    std::vector<float> l = {3.0f, 2.5f, -1.0f};
    SamplingParams p = plain(0.0f);
    p.repeat_penalty = 1.5f;
    Sampler s(p);
    EXPECT_EQ(s.sample(l), 0);
    s.accept(0);
    EXPECT_EQ(s.sample(l), 1);
    // Negative logits are multiplied: token 2 penalised from -1 to -1.5 keeps last place.
    // Frequency/presence penalties subtract count * f + p.
    SamplingParams q = plain(0.0f);
    q.frequency_penalty = 0.2f;
    q.presence_penalty = 0.15f;
    Sampler t(q);
    t.accept(0);
    t.accept(0);  // 3 - 2*0.2 - 0.15 = 2.45 < 2.5
    EXPECT_EQ(t.sample(l), 1);
    q.repeat_last_n = 1;  // only the most recent token counts
    Sampler u(q);
    u.accept(0);
    u.accept(1);  // token 0 no longer penalised; token 1: 2.5 - 0.35
    EXPECT_EQ(u.sample(l), 0);
}

}  // namespace
}  // namespace syslm::infer
