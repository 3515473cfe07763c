// Speculative decoding: greedy output equals the target's own tokens whatever the draft (a random
// model of another width, or the target itself, which is then always accepted); the accept /
// residual rule reproduces the target distribution exactly (checked by simulation against p);
// penalties and vocabulary mismatches are refused.
#include "infer/speculative.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../common/random_model.hpp"
#include "core/error.hpp"

namespace syslm::infer {
namespace {

struct Models {
    model::Model target, draft;
    tokenizer::Tokenizer tok;
};

Models& models() {
    static Models m = [] {
        model::InitConfig t = testing::small_model_config("llama", 256, 41);
        model::InitConfig d = testing::small_model_config("llama", 256, 42);
        d.n_embd = 32;  // a smaller, unrelated draft
        d.n_head = 4;
        d.n_ff = 40;
        const std::string tp = testing::write_test_model("spec_target", t);
        const std::string dp = testing::write_test_model("spec_draft", d);
        model::Model target(tp);
        return Models{std::move(target), model::Model(dp),
                      tokenizer::Tokenizer::from_gguf(model::Model(tp).file())};
    }();
    return m;
}

std::vector<int32_t> greedy_plain(const std::vector<int32_t>& prompt, int n,
                                  const model::Model& target = models().target) {
    model::Context ctx(target, 256, 2, 64, DType::F32);
    SamplingParams sp;
    sp.temperature = 0;
    Sampler s(sp);
    std::vector<int32_t> out;
    std::span<const float> logits = ctx.forward(prompt);
    for (int i = 0; i < n; ++i) {
        const int32_t t = s.sample(logits);
        out.push_back(t);
        const int32_t one[1] = {t};
        logits = ctx.forward(one);
    }
    return out;
}

std::string decode_all(const std::vector<int32_t>& toks) {
    std::string s;
    for (int32_t t : toks) s += models().tok.token_to_piece(t);
    return s;
}

TEST(Speculative, GreedyTokensEqualTheTargetsAlone) {
    Models& m = models();
    std::mt19937 rng(5);
    for (int trial = 0; trial < 4; ++trial) {
        std::vector<int32_t> prompt(static_cast<size_t>(1 + trial * 7));
        for (auto& t : prompt) t = static_cast<int32_t>(rng() % 2000 + 10);
        const int n = 37;
        const std::vector<int32_t> want = greedy_plain(prompt, n);
        for (const model::Model* draft : {&m.draft, &m.target}) {
            for (bool adaptive : {true, false}) {
                model::Context tc(m.target, 256, 2, 64, DType::F32),
                    dc(*draft, 256, 2, 64, DType::F32);
                SamplingParams sp;
                sp.temperature = 0;
                Sampler s(sp);
                SpeculativeOptions o;
                o.k = 3;
                o.adaptive = adaptive;
                SpeculativeStats st;
                std::string text;
                const GenerateStats g = speculative_generate(
                    tc, dc, m.tok, prompt, n, s, /*ignore_eos=*/true,
                    [&](std::string_view t) { text += t; }, o, &st);
                EXPECT_EQ(g.n_generated, n);
                EXPECT_EQ(text, decode_all(want)) << "trial " << trial << " adaptive " << adaptive;
                EXPECT_GT(st.rounds, 0);
                if (draft == &m.target) {
                    EXPECT_EQ(st.accepted, st.drafted);  // the target drafting for itself
                    // Fixed k = 3: 4 tokens a round. (Adaptive picks k = 1 here: a draft as
                    // costly as the target gains nothing from longer drafts.)
                    if (!adaptive) {
                        EXPECT_EQ(st.rounds, (n + 3) / 4);
                    }
                }
            }
        }
    }
}

// The rule's output is distributed as p for any q: simulated.
// A target with a linear-attention layer: each rejected draft rolls its recurrent state back
// (to the verify call's checkpoint), and the greedy tokens stay the target's own.
// spare_target 1: every length is within 100% of the fastest, so the adaptive rule takes the
// longest (k_max) once it has measured a round; the target drafting for itself keeps every draft.
TEST(Speculative, SparingTheTargetTakesTheLongestDrafts) {
    Models& m = models();
    const std::vector<int32_t> prompt = {11, 25, 301, 77};
    const int n = 60;
    model::Context tc(m.target, 256, 2, 64, DType::F32), dc(m.target, 256, 2, 64, DType::F32);
    SamplingParams sp;
    sp.temperature = 0;
    Sampler s(sp);
    SpeculativeOptions o;
    o.k = 2;
    o.k_max = 8;
    o.spare_target = 1.0;
    SpeculativeStats st;
    std::string text;
    speculative_generate(
        tc, dc, m.tok, prompt, n, s, /*ignore_eos=*/true, [&](std::string_view t) { text += t; }, o,
        &st);
    EXPECT_EQ(text, decode_all(greedy_plain(prompt, n)));
    // 3 tokens in the first round, then 9 a round (the 16th round would be a trial without).
    EXPECT_EQ(st.rounds, 1 + (n - 3 + 8) / 9);
}

TEST(Speculative, ALinearAttentionTargetRollsItsStateBack) {
    Models& m = models();
    model::InitConfig c = testing::small_model_config("llama_linear", 256, 43);
    const model::Model target(testing::write_test_model("spec_target_linear", c));
    std::vector<int32_t> prompt(9);
    std::mt19937 rng(11);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % 2000 + 10);
    const int n = 30;
    const std::vector<int32_t> want = greedy_plain(prompt, n, target);
    SamplingParams sp;
    sp.temperature = 0;
    model::Context tc(target, 256, 2, 64, DType::F32), dc(m.draft, 256, 2, 64, DType::F32);
    Sampler s(sp);
    SpeculativeOptions o;
    o.k = 4;
    o.adaptive = false;
    SpeculativeStats st;
    std::string text;
    speculative_generate(
        tc, dc, m.tok, prompt, n, s, /*ignore_eos=*/true, [&](std::string_view t) { text += t; }, o,
        &st);
    EXPECT_EQ(text, decode_all(want));
    EXPECT_LT(st.accepted, st.drafted) << "an unrelated draft: rejections (rollbacks) expected";
}

TEST(Speculative, VerifyRuleReproducesTheTargetDistribution) {
    const std::vector<TokenProb> p = {{3, 0.5f}, {1, 0.3f}, {4, 0.15f}, {0, 0.05f}};
    const std::vector<TokenProb> q = {{1, 0.6f}, {2, 0.25f}, {3, 0.1f}, {0, 0.05f}};
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(0, 1);
    const int n = 400000;
    std::vector<double> count(5, 0);
    int kept_n = 0;
    for (int i = 0; i < n; ++i) {
        double c = 0, x = u(rng);
        int32_t d = q.back().id;
        for (const auto& t : q)
            if (x < (c += t.p)) {
                d = t.id;
                break;
            }
        bool kept = false;
        ++count[static_cast<size_t>(speculative_verify(p, q, d, u(rng), u(rng), &kept))];
        kept_n += kept;
    }
    double want[5] = {0.05, 0.3, 0.0, 0.5, 0.15};
    for (int id = 0; id < 5; ++id) EXPECT_NEAR(count[id] / n, want[id], 0.004) << "token " << id;
    // Acceptance is sum_x min(p, q) = 0.3 + 0.1 + 0.05 = 0.45.
    EXPECT_NEAR(static_cast<double>(kept_n) / n, 0.45, 0.004);
}

TEST(Speculative, SamplingRunsAndRefusesPenalties) {
    Models& m = models();
    const std::vector<int32_t> prompt = {5, 17, 300};
    model::Context tc(m.target, 256, 2, 64, DType::F32), dc(m.draft, 256, 2, 64, DType::F32);
    SamplingParams sp;
    sp.temperature = 0.9f;
    sp.seed = 3;
    Sampler s(sp);
    SpeculativeStats st;
    const GenerateStats g = speculative_generate(
        tc, dc, m.tok, prompt, 50, s, true, [](std::string_view) {}, {}, &st);
    EXPECT_EQ(g.n_generated, 50);
    EXPECT_GT(st.drafted, 0);

    model::Context tc2(m.target, 256, 2, 64, DType::F32), dc2(m.draft, 256, 2, 64, DType::F32);
    sp.repeat_penalty = 1.1f;
    Sampler pen(sp);
    EXPECT_THROW(speculative_generate(
                     tc2, dc2, m.tok, prompt, 5, pen, true, [](std::string_view) {}, {}, nullptr),
                 Error);
}

// A windowed target keeps a KV ring that takes back at most a bounded number of positions: a
// longer adaptive draft is refused up front, not midway (Context::truncate would throw).
TEST(Speculative, ADraftLongerThanAWindowRingTakesBackIsRefused) {
    Models& m = models();
    model::InitConfig c = testing::small_model_config("llama", 256, 7);
    c.window = 8;
    const model::Model windowed(testing::write_test_model("spec_windowed", c));
    model::Context tc(windowed, 256, 2, 16, DType::F32), dc(m.draft, 256, 2, 16, DType::F32);
    ASSERT_TRUE(tc.kv_cache().ring(0));  // 8 + 64 - 1 rounded up: 128 rows of 256
    const std::vector<int32_t> prompt = {5, 17, 300};
    SamplingParams sp;
    sp.temperature = 0;
    Sampler s(sp);
    SpeculativeOptions o;
    o.k_max = tc.kv_cache().max_rollback();
    EXPECT_THROW(speculative_generate(
                     tc, dc, m.tok, prompt, 5, s, true, [](std::string_view) {}, o, nullptr),
                 Error);
    o.k_max = 16;  // within the ring: runs
    model::Context tc2(windowed, 256, 2, 16, DType::F32), dc2(m.draft, 256, 2, 16, DType::F32);
    EXPECT_EQ(speculative_generate(
                  tc2, dc2, m.tok, prompt, 40, s, true, [](std::string_view) {}, o, nullptr)
                  .n_generated,
              40);
}

}  // namespace
}  // namespace syslm::infer
