// The allocation's hull points are optimal: on random sensitivity tables of awkward sizes, no
// choice of types (enumerated exhaustively) has at most a hull point's bytes and a lower summed
// KL; the points run from the least-KL choice to the fewest bytes with bytes falling and KL
// rising; and a table whose optimum is known by construction is solved exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "tune/allocate.hpp"

namespace syslm::tune {
namespace {

std::vector<TensorSensitivity> random_table(std::mt19937& rng, int tensors, int types) {
    const DType kTypes[] = {DType::Q8_0, DType::Q6_K, DType::Q5_K, DType::Q4_K, DType::Q3_K};
    std::vector<TensorSensitivity> t;
    for (int i = 0; i < tensors; ++i) {
        TensorSensitivity s;
        s.name = cat("t", i);
        const uint64_t size = 1000 + rng() % 9000;
        double kl = 0;
        for (int k = 0; k < types; ++k) {
            // Bytes fall and KL rises with k, with noise that makes some options non-convex.
            kl += std::uniform_real_distribution<double>(0.0, 0.01)(rng) * (k + 1);
            s.options.push_back({kTypes[k], size * (types - k) / types + rng() % 50, k ? kl : 0});
        }
        t.push_back(std::move(s));
    }
    return t;
}

TEST(Allocation, HullPointsAreOptimalForTheirBytes) {
    std::mt19937 rng(17);
    for (int trial = 0; trial < 20; ++trial) {
        const int tensors = 2 + trial % 4, types = 2 + trial % 3;
        const auto table = random_table(rng, tensors, types);
        const std::vector<Allocation> hull = allocation_hull(table);
        ASSERT_FALSE(hull.empty());
        for (size_t i = 1; i < hull.size(); ++i) {
            EXPECT_LT(hull[i].bytes, hull[i - 1].bytes);
            EXPECT_GE(hull[i].predicted_kl, hull[i - 1].predicted_kl - 1e-12);
        }
        // Every combination, by counting in base `types`.
        uint64_t combos = 1;
        for (int i = 0; i < tensors; ++i) combos *= static_cast<uint64_t>(types);
        for (uint64_t c = 0; c < combos; ++c) {
            uint64_t bytes = 0, x = c;
            double kl = 0;
            for (int i = 0; i < tensors; ++i, x /= types) {
                bytes += table[i].options[x % types].bytes;
                kl += table[i].options[x % types].kl;
            }
            for (const Allocation& a : hull)
                if (bytes <= a.bytes) {
                    EXPECT_GE(kl, a.predicted_kl - 1e-12) << "trial " << trial << " combo " << c;
                }
        }
        // The sums the points report are their types' sums.
        for (const Allocation& a : hull) {
            uint64_t bytes = 0;
            double kl = 0;
            for (size_t i = 0; i < table.size(); ++i)
                for (const TypeCost& o : table[i].options)
                    if (o.type == a.types[i]) {
                        bytes += o.bytes;
                        kl += o.kl;
                    }
            EXPECT_EQ(bytes, a.bytes);
            EXPECT_NEAR(kl, a.predicted_kl, 1e-12);
        }
    }
}

// With a cost that is not the bytes (a type's kernel slower per byte), the hull is optimal in
// that cost, and an option that saves bytes but costs more time is never taken.
TEST(Allocation, HullPointsAreOptimalForTheirCost) {
    std::mt19937 rng(29);
    for (int trial = 0; trial < 20; ++trial) {
        const int tensors = 2 + trial % 4, types = 2 + trial % 3;
        auto table = random_table(rng, tensors, types);
        std::vector<double> per_byte(types);
        for (double& c : per_byte) c = std::uniform_real_distribution<double>(0.5, 2.0)(rng);
        for (TensorSensitivity& t : table)
            for (int k = 0; k < types; ++k)
                t.options[k].cost = t.options[k].bytes * per_byte[k] * 1e-9;
        const std::vector<Allocation> hull = allocation_hull(table);
        for (size_t i = 1; i < hull.size(); ++i) EXPECT_LT(hull[i].cost, hull[i - 1].cost);
        uint64_t combos = 1;
        for (int i = 0; i < tensors; ++i) combos *= static_cast<uint64_t>(types);
        for (uint64_t c = 0; c < combos; ++c) {
            double cost = 0, kl = 0;
            uint64_t x = c;
            for (int i = 0; i < tensors; ++i, x /= types) {
                cost += table[i].options[x % types].cost;
                kl += table[i].options[x % types].kl;
            }
            for (const Allocation& a : hull) {
                if (cost <= a.cost * (1 - 1e-12)) {
                    EXPECT_GE(kl, a.predicted_kl - 1e-12);
                }
            }
        }
    }
    std::vector<TensorSensitivity> t(1);
    t[0].options = {{DType::Q8_0, 1000, 0.0, 10}, {DType::Q4_0, 500, 0.01, 5},
                    {DType::Q2_K, 300, 0.05, 7}};
    for (const Allocation& a : allocation_hull(t)) EXPECT_NE(a.types[0], DType::Q2_K);
}

// Two tensors, one ten times as sensitive: the first bytes saved come from the insensitive one.
TEST(Allocation, TakesBytesFromTheLeastSensitiveTensorFirst) {
    std::vector<TensorSensitivity> t(2);
    t[0].options = {{DType::Q8_0, 1000, 0.0}, {DType::Q4_0, 500, 0.01}};
    t[1].options = {{DType::Q8_0, 1000, 0.0}, {DType::Q4_0, 500, 0.10}};
    const auto hull = allocation_hull(t);
    ASSERT_EQ(hull.size(), 3u);
    EXPECT_EQ(hull[1].types, (std::vector<DType>{DType::Q4_0, DType::Q8_0}));
    EXPECT_EQ(hull[1].bytes, 1500u);
    EXPECT_NEAR(hull[1].predicted_kl, 0.01, 1e-15);
    EXPECT_EQ(hull[2].types, (std::vector<DType>{DType::Q4_0, DType::Q4_0}));
}

// A dominated option (more bytes and more KL) and one above the hull are never chosen.
TEST(Allocation, SkipsDominatedAndNonConvexOptions) {
    std::vector<TensorSensitivity> t(1);
    t[0].options = {{DType::Q8_0, 1000, 0.0},
                    {DType::Q6_K, 900, 0.05},   // above the line from Q8_0 to Q4_K
                    {DType::Q5_K, 800, 0.001},  // makes Q6_K dominated
                    {DType::Q4_K, 500, 0.02},
                    {DType::Q3_K, 600, 0.03}};  // more bytes and more KL than Q4_K
    const auto hull = allocation_hull(t);
    std::vector<DType> seen;
    for (const Allocation& a : hull) seen.push_back(a.types[0]);
    EXPECT_EQ(seen, (std::vector<DType>{DType::Q8_0, DType::Q5_K, DType::Q4_K}));
}

}  // namespace
}  // namespace syslm::tune
