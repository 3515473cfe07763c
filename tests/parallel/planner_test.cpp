// `syslm plan`'s cost model: the cluster description, parameter counts against a published model
// (LLaMA-7B: 6.74 B), and the model's arithmetic on hand-computed cases (compute time, bubble,
// ZeRO's memory division, bytes of the data-parallel reduction), and the search's constraints.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "parallel/planner.hpp"

namespace syslm::parallel {
namespace {

ModelShape llama7b() {
    ModelShape m;
    m.layers = 32;
    m.dim = 4096;
    m.heads = 32;
    m.kv_heads = 32;
    m.ffn = 11008;
    m.vocab = 32000;
    return m;
}

TEST(Planner, ParsesClusterDescriptions) {
    const Cluster c = parse_cluster("64 nodes x 8 H200, 400 Gb/s");
    EXPECT_EQ(c.nodes, 64);
    EXPECT_EQ(c.per_node, 8);
    EXPECT_EQ(c.devices(), 512);
    EXPECT_EQ(c.device.name, "H200");
    EXPECT_DOUBLE_EQ(c.inter_bw, 50e9);
    EXPECT_EQ(parse_cluster("1 node x 2 cpu").devices(), 2);
    EXPECT_EQ(parse_cluster("2 nodes x 4 a100, 25 GB/s").inter_bw, 25e9);
    EXPECT_THROW(parse_cluster("64 nodes x 8 TPU, 400 Gb/s"), Error);
    EXPECT_THROW(parse_cluster("eight H200"), Error);
    EXPECT_THROW(parse_cluster("2 nodes x 8 H100"), Error);  // no inter-node bandwidth
}

TEST(Planner, CountsParametersAsPublished) {
    EXPECT_NEAR(llama7b().params() / 1e9, 6.738, 0.005);
}

TEST(Planner, EstimatesFollowTheirFormulas) {
    const ModelShape m = llama7b();
    Cluster c = parse_cluster("1 node x 8 H100");
    Workload w;
    w.seq = 2048;
    w.global_batch = 64;
    w.micro_batch = 1;
    const Estimate one = estimate(m, c, w, {8, 1, 1, 0, Recompute::None});
    ASSERT_TRUE(one.why_not.empty()) << one.why_not;
    const double tokens = 64.0 * 2048;
    EXPECT_NEAR(one.compute_s,
                tokens / 8 * flops_per_token(m, 2048, Recompute::None) /
                    (c.device.peak * c.device.efficiency),
                1e-9);
    EXPECT_DOUBLE_EQ(one.bubble_s, 0.0);
    // Plain data parallel all-reduces the f32 gradients: 2 (p-1)/p of them per device.
    EXPECT_NEAR(one.dp_bytes, 2.0 * 7 / 8 * m.params() * 4, 1.0);
    // ZeRO-1 divides the optimizer state (moments + master) by dp, ZeRO-2 also the gradients.
    const Estimate z1 = estimate(m, c, w, {8, 1, 1, 1, Recompute::None});
    const Estimate z2 = estimate(m, c, w, {8, 1, 1, 2, Recompute::None});
    EXPECT_NEAR(z1.mem_optimizer, one.mem_optimizer / 8, 1.0);
    EXPECT_NEAR(z2.mem_grads, one.mem_grads / 8, 1.0);
    EXPECT_LT(z2.memory(), z1.memory());
    // Pipeline: bubble = compute x (p - 1) / m.
    const Estimate pp = estimate(m, c, w, {2, 1, 4, 0, Recompute::None});
    ASSERT_TRUE(pp.why_not.empty()) << pp.why_not;
    EXPECT_EQ(pp.micro_batches, 32);
    EXPECT_NEAR(pp.bubble_s, pp.compute_s * 3 / 32, 1e-12);
    // Full recompute costs time and saves activation memory.
    const Estimate full = estimate(m, c, w, {8, 1, 1, 0, Recompute::Full});
    EXPECT_GT(full.compute_s, one.compute_s);
    EXPECT_LT(full.mem_activations, one.mem_activations);
    // Invalid layouts say why.
    EXPECT_FALSE(estimate(m, c, w, {1, 16, 1, 0, Recompute::None}).why_not.empty());
    EXPECT_FALSE(estimate(m, c, w, {1, 3, 1, 0, Recompute::None}).why_not.empty());
}

TEST(Planner, SearchesValidLayoutsFittingFirst) {
    const ModelShape m = llama7b();
    const Cluster c = parse_cluster("2 nodes x 8 H100, 400 Gb/s");
    Workload w;
    w.seq = 4096;
    w.global_batch = 256;
    const std::vector<Estimate> all = search(m, c, w);
    ASSERT_FALSE(all.empty());
    bool seen_unfit = false;
    for (const Estimate& e : all) {
        EXPECT_EQ(e.layout.dp * e.layout.tp * e.layout.pp, 16);
        EXPECT_LE(e.layout.tp, 8);
        if (!e.fits) seen_unfit = true;
        EXPECT_FALSE(seen_unfit && e.fits) << "a fitting layout after one that does not fit";
    }
    EXPECT_TRUE(all.front().fits);
    for (size_t i = 1; i < all.size() && all[i].fits; ++i)
        EXPECT_LE(all[i - 1].step_s, all[i].step_s);
}

}  // namespace
}  // namespace syslm::parallel
