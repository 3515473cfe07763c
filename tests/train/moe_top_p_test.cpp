// Top-p MoE routing and expert capacity in training (train/moe.cpp): rows route to a varying
// number of experts, the choices left out (or dropped past an expert's capacity) take no slot.
// The gradient against the loss itself: the directional derivative along the gradient
// (restricted to the experts, then to the routers) by central differences must equal |g|^2. The
// selection is piecewise constant, so the steps are small enough not to cross a boundary, and
// large enough that f32 rounding of the loss stays below 1% of the difference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../common/random_model.hpp"
#include "backend/cpu_backend.hpp"
#include "io/gguf.hpp"
#include "train/train_model.hpp"

namespace syslm::train {
namespace {

using testing::random_ids;

model::InitConfig top_p_config(float top_p) {
    model::InitConfig c = testing::small_model_config("mixtral", 32, 17);
    c.n_expert = 6;
    c.n_expert_used = 4;
    c.expert_top_p = top_p;
    c.n_expert_used_min = 1;
    return c;
}

// Routers of N(0, 1) weights: a random init's near-uniform probabilities would let a step of
// 1e-3 reorder the experts.
void sharpen_routers(TrainModel& m) {
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const Param& p : m.params().params())
        if (p.name.ends_with("ffn_gate_inp.weight"))
            for (int64_t i = 0; i < p.numel; ++i) m.params().values()[p.offset + i] = normal(rng);
}

// After m.forward_backward on these tokens: the gradient is the loss's derivative.
void expect_gradient_is_the_derivative(TrainModel& m, const std::vector<int32_t>& tokens,
                                       const std::vector<int32_t>& targets, int B, int T,
                                       backend::Backend& be) {
    ParamStore& ps = m.params();
    m.set_router_aux_coef(0.0);  // loss() is the cross-entropy only
    const std::vector<float> w0(ps.values(), ps.values() + ps.size());
    const std::vector<float> g(ps.grads(), ps.grads() + ps.size());
    for (const std::string kind : {"_exps.weight", "ffn_gate_inp.weight"}) {
        std::vector<double> d(ps.size(), 0.0);
        double gg = 0;
        for (const Param& p : ps.params())
            if (p.name.ends_with(kind))
                for (int64_t i = 0; i < p.numel; ++i) {
                    d[p.offset + i] = g[p.offset + i];
                    gg += double(g[p.offset + i]) * g[p.offset + i];
                }
        ASSERT_GT(gg, 0.0) << kind;
        const double h = 2e-3 / std::sqrt(gg);  // a step of norm 0.002 in the weights
        auto loss_at = [&](double s) {
            for (size_t i = 0; i < w0.size(); ++i)
                ps.values()[i] = static_cast<float>(w0[i] + s * d[i]);
            return m.loss(tokens, targets, B, T, be);
        };
        const double fd = (loss_at(h) - loss_at(-h)) / (2 * h);
        loss_at(0);
        EXPECT_NEAR(fd, gg, 0.01 * gg) << kind;
    }
}

TEST(MoeTopP, GradientIsTheLossDerivative) {
    const std::string path = testing::write_test_model("moe_top_p", top_p_config(0.5f));
    const io::GGUFFile file(path);
    TrainModel m(file);
    ASSERT_GT(m.hparams().expert_top_p, 0.0f);
    m.set_router_aux_coef(0.0);  // loss() is the cross-entropy only
    sharpen_routers(m);
    backend::CpuBackend be(2);
    const int B = 2, T = 9;
    const auto tokens = random_ids(B * T, 1), targets = random_ids(B * T, 2);
    m.forward_backward(tokens, targets, B, T, be);
    // Top-p chose between 1 and 4 experts per row: fewer than top-4, more than top-1.
    EXPECT_GT(m.experts_per_token(), 1.0);
    EXPECT_LT(m.experts_per_token(), 4.0);
    expect_gradient_is_the_derivative(m, tokens, targets, B, T, be);
}

// Capacity 0.5 on top-2 of 6 experts: each expert takes at most ceil(0.5 x 18 x 2 / 6) = 3 of
// the 36 choices per layer, so some are dropped (and the rows that lose one renormalise over
// the other); the gradient is still the loss's derivative.
TEST(MoeCapacity, GradientIsTheLossDerivative) {
    model::InitConfig c = top_p_config(0.0f);
    c.n_expert_used = 2;
    const io::GGUFFile file(testing::write_test_model("moe_capacity", c));
    TrainModel m(file);
    m.set_expert_capacity(0.5);
    m.set_router_aux_coef(0.0);
    sharpen_routers(m);
    backend::CpuBackend be(2);
    const int B = 2, T = 9;
    const auto tokens = random_ids(B * T, 7), targets = random_ids(B * T, 8);
    m.forward_backward(tokens, targets, B, T, be);
    EXPECT_GT(m.dropped_share(), 0.0);
    // At most 6 experts x 3 kept of 18 rows per layer: 1 expert per token at most.
    EXPECT_LE(m.experts_per_token(), 1.0);
    EXPECT_NEAR(m.experts_per_token(), 2.0 * (1.0 - m.dropped_share()), 1e-12);
    expect_gradient_is_the_derivative(m, tokens, targets, B, T, be);
}

// A capacity that cannot bind (factor experts / k: every expert may take every row) changes
// nothing, bit for bit; a binding one changes the loss; recompute gives the same gradients.
TEST(MoeCapacity, DropsOnlyWhatExceedsIt) {
    model::InitConfig c = top_p_config(0.0f);
    c.n_expert_used = 2;
    const io::GGUFFile file(testing::write_test_model("moe_capacity_bits", c));
    const int B = 2, T = 9;
    const auto tokens = random_ids(B * T, 9), targets = random_ids(B * T, 10);
    backend::CpuBackend be(2);
    std::vector<std::vector<float>> grads;
    std::vector<double> losses;
    for (const auto& [factor, rc] :
         {std::pair{0.0, Recompute::None}, std::pair{3.0, Recompute::None},
          std::pair{0.6, Recompute::None}, std::pair{0.6, Recompute::Full},
          std::pair{0.6, Recompute::Selective}}) {
        TrainModel m(file, rc);
        m.set_expert_capacity(factor);
        losses.push_back(m.forward_backward(tokens, targets, B, T, be));
        grads.emplace_back(m.params().grads(), m.params().grads() + m.params().size());
        EXPECT_EQ(m.dropped_share() > 0, factor > 0 && factor < 1) << factor;
    }
    EXPECT_EQ(losses[0], losses[1]);
    EXPECT_EQ(grads[0], grads[1]);
    EXPECT_NE(losses[0], losses[2]);
    EXPECT_EQ(grads[2], grads[3]);
    EXPECT_EQ(grads[2], grads[4]);
}

// Activation recompute rebuilds top-p's intermediates over the filled slots only: the gradients
// are the same bits as without it.
TEST(MoeTopP, RecomputeGivesTheSameGradients) {
    const io::GGUFFile file(testing::write_test_model("moe_top_p_rc", top_p_config(0.5f)));
    const int B = 2, T = 9;
    const auto tokens = random_ids(B * T, 5), targets = random_ids(B * T, 6);
    backend::CpuBackend be(2);
    std::vector<std::vector<float>> grads;
    for (const Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full}) {
        TrainModel m(file, rc);
        m.forward_backward(tokens, targets, B, T, be);
        grads.emplace_back(m.params().grads(), m.params().grads() + m.params().size());
    }
    EXPECT_EQ(grads[0], grads[1]);
    EXPECT_EQ(grads[0], grads[2]);
}

// Top-p takes fewer experts than the most it may: the loss differs from top-k's with the same
// weights, and a tighter p changes it again.
TEST(MoeTopP, RoutingChangesTheModel) {
    const int B = 2, T = 9;
    const auto tokens = random_ids(B * T, 3), targets = random_ids(B * T, 4);
    backend::CpuBackend be(2);
    std::vector<double> losses;
    for (const float p : {0.0f, 0.5f, 0.9f}) {
        const io::GGUFFile file(
            testing::write_test_model("moe_top_p_" + std::to_string(int(p * 10)), top_p_config(p)));
        TrainModel m(file);
        losses.push_back(m.loss(tokens, targets, B, T, be));
    }
    EXPECT_NE(losses[0], losses[1]);
    EXPECT_NE(losses[1], losses[2]);
}

}  // namespace
}  // namespace syslm::train
