// Top-p MoE routing in training (train/moe.cpp): rows route to a varying number of experts, the
// choices left out take no slot. The gradient against the loss itself: the directional
// derivative along the gradient (restricted to the experts, then to the routers) by central
// differences must equal |g|^2. Top-p's selection is piecewise constant, so the steps are small
// enough not to cross a boundary, and large enough that f32 rounding of the loss stays below
// 1% of the difference.
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

TEST(MoeTopP, GradientIsTheLossDerivative) {
    const std::string path = testing::write_test_model("moe_top_p", top_p_config(0.5f));
    const io::GGUFFile file(path);
    TrainModel m(file);
    ASSERT_GT(m.hparams().expert_top_p, 0.0f);
    m.set_router_aux_coef(0.0);  // loss() is the cross-entropy only
    // Routers of N(0, 1) weights: a random init's near-uniform probabilities would let a step
    // of 1e-3 reorder the experts.
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const Param& p : m.params().params())
        if (p.name.ends_with("ffn_gate_inp.weight"))
            for (int64_t i = 0; i < p.numel; ++i) m.params().values()[p.offset + i] = normal(rng);
    backend::CpuBackend be(2);
    const int B = 2, T = 9;
    const auto tokens = random_ids(B * T, 1), targets = random_ids(B * T, 2);
    m.forward_backward(tokens, targets, B, T, be);
    // Top-p chose between 1 and 4 experts per row: fewer than top-4, more than top-1.
    EXPECT_GT(m.experts_per_token(), 1.0);
    EXPECT_LT(m.experts_per_token(), 4.0);
    ParamStore& ps = m.params();
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
