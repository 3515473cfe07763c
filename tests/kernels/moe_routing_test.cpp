// MoE routing (kernels/cpu/moe_routing.hpp): top-k, and top-p between its bounds, on router
// logits whose softmax is known (the logs of chosen probabilities).
#include "kernels/cpu/moe_routing.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace syslm::kernels {
namespace {

struct Routed {
    int64_t n;
    std::vector<int32_t> ids;
    std::vector<float> weights;
    float lse;
};

// Probabilities 0.05, 0.5, 0.15, 0.3 (expert 1 first, then 3, 2, 0) as logits shifted by 2.
Routed route(const MoeRouting& r) {
    std::vector<float> p = {std::log(0.05f) + 2, std::log(0.5f) + 2, std::log(0.15f) + 2,
                            std::log(0.3f) + 2};
    std::vector<int64_t> order(p.size());
    Routed out{0, std::vector<int32_t>(static_cast<size_t>(r.k_max)),
               std::vector<float>(static_cast<size_t>(r.k_max)), 0.0f};
    out.n =
        moe_route_row(p.data(), 4, r, order.data(), out.ids.data(), out.weights.data(), &out.lse);
    return out;
}

TEST(MoeRouting, TopKTakesTheKMostProbable) {
    const Routed r = route({3, 3, 0.0f, false});
    EXPECT_EQ(r.n, 3);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3, 2}));
    EXPECT_NEAR(r.weights[0], 0.5f, 1e-6f);
    EXPECT_NEAR(r.weights[2], 0.15f, 1e-6f);
    EXPECT_NEAR(r.lse, 2.0f, 1e-6f);  // the probabilities sum to 1 before the shift
}

TEST(MoeRouting, TopPTakesTheFewestThatReachP) {
    auto n_of = [](float p, int64_t k_min, int64_t k_max) {
        return route({k_max, k_min, p, true}).n;
    };
    EXPECT_EQ(n_of(0.4f, 1, 4), 1);   // 0.5 >= 0.4
    EXPECT_EQ(n_of(0.5f, 1, 4), 1);   // reached exactly
    EXPECT_EQ(n_of(0.7f, 1, 4), 2);   // 0.5 + 0.3
    EXPECT_EQ(n_of(0.9f, 1, 4), 3);   // 0.95
    EXPECT_EQ(n_of(0.99f, 1, 4), 4);  // all four sum to 1
    EXPECT_EQ(n_of(0.9f, 1, 2), 2);   // at most k_max
    EXPECT_EQ(n_of(0.4f, 2, 4), 2);   // at least k_min
    const Routed r = route({4, 1, 0.7f, true});
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3, -1, -1}));
    EXPECT_NEAR(r.weights[0], 0.5f / 0.8f, 1e-6f);  // renormalised over the chosen two
    EXPECT_NEAR(r.weights[1], 0.3f / 0.8f, 1e-6f);
    EXPECT_EQ(r.weights[2], 0.0f);
    EXPECT_EQ(r.weights[3], 0.0f);
    const Routed raw = route({4, 1, 0.7f, false});
    EXPECT_NEAR(raw.weights[0], 0.5f, 1e-6f);
}

}  // namespace
}  // namespace syslm::kernels
