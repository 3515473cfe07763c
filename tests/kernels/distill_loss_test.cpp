// The distillation loss against its definition computed here in long double, its gradient
// against central finite differences of that definition, and alpha = 0 against plain
// cross-entropy; ignored rows (target < 0) get zero gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/cpu/backward.hpp"

namespace syslm::kernels {
namespace {

long double reference(const std::vector<double>& z, const std::vector<float>& t,
                      const std::vector<int32_t>& y, int64_t V, double alpha, double tau) {
    long double total = 0;
    int n = 0;
    for (size_t r = 0; r < y.size(); ++r) {
        if (y[r] < 0) continue;
        auto lse = [&](auto f) {
            long double mx = -INFINITY, s = 0;
            for (int64_t i = 0; i < V; ++i) mx = std::max<long double>(mx, f(i));
            for (int64_t i = 0; i < V; ++i) s += std::exp(f(i) - mx);
            return mx + std::log(s);
        };
        const long double l1 = lse([&](int64_t i) { return (long double)z[r * V + i]; });
        const long double ls = lse([&](int64_t i) { return z[r * V + i] / (long double)tau; });
        const long double lt = lse([&](int64_t i) { return t[r * V + i] / (long double)tau; });
        long double kl = 0;
        for (int64_t i = 0; i < V; ++i) {
            const long double lp = t[r * V + i] / (long double)tau - lt;
            kl += std::exp(lp) * (lp - (z[r * V + i] / (long double)tau - ls));
        }
        total += alpha * tau * tau * kl + (1 - alpha) * (l1 - z[r * V + y[r]]);
        ++n;
    }
    return total / n;
}

TEST(DistillLoss, MatchesDefinitionAndFiniteDifferences) {
    const int64_t R = 5, V = 37;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0, 2);
    std::vector<float> z(R * V), t(R * V);
    for (auto& v : z) v = nd(rng);
    for (auto& v : t) v = nd(rng);
    const std::vector<int32_t> y = {3, -1, 36, 0, 17};
    ThreadPool pool(2);
    for (double alpha : {0.0, 0.25, 1.0}) {  // exact in float
        for (double tau : {1.0, 2.5}) {
            std::vector<float> g = z;
            const double loss = distill_loss_fused(g.data(), t.data(), y.data(), R, V,
                                                   static_cast<float>(alpha),
                                                   static_cast<float>(tau), pool);
            std::vector<double> zd(z.begin(), z.end());
            EXPECT_NEAR(loss, static_cast<double>(reference(zd, t, y, V, alpha, tau)), 1e-9);
            for (int64_t i = 0; i < R * V; i += 7) {
                const double h = 1e-4;
                std::vector<double> zp = zd, zm = zd;
                zp[i] += h;
                zm[i] -= h;
                const double fd = static_cast<double>(
                    (reference(zp, t, y, V, alpha, tau) - reference(zm, t, y, V, alpha, tau)) /
                    (2 * h));
                EXPECT_NEAR(g[i], fd, 1e-6) << "alpha " << alpha << " tau " << tau << " at " << i;
            }
            for (int64_t i = 0; i < V; ++i) EXPECT_EQ(g[1 * V + i], 0.0f);  // ignored row
        }
    }
    // alpha 0 is cross-entropy.
    std::vector<float> a = z, b = z;
    const double la = distill_loss_fused(a.data(), t.data(), y.data(), R, V, 0.0f, 2.0f, pool);
    const double lb = cross_entropy_fused(b.data(), y.data(), R, V, pool);
    EXPECT_NEAR(la, lb, 1e-6);
    for (int64_t i = 0; i < R * V; ++i) EXPECT_NEAR(a[i], b[i], 1e-7);
}

// Top-k teacher: equal to the dense kernel on a teacher whose other logits are -inf (k = V: the
// ids in any order give the dense result).
TEST(DistillLoss, TopKEqualsDenseOnTruncatedTeacher) {
    const int64_t R = 4, V = 29;
    const int k = 6;
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0, 2);
    std::vector<float> z(R * V), t(R * V);
    for (auto& v : z) v = nd(rng);
    for (auto& v : t) v = nd(rng);
    const std::vector<int32_t> y = {3, 28, -1, 0};
    std::vector<int32_t> ids(R * k);
    std::vector<float> top(R * k), dense(R * V, -INFINITY);
    for (int64_t r = 0; r < R; ++r)
        for (int j = 0; j < k; ++j) {
            const int32_t id = static_cast<int32_t>((r * 7 + j * 5) % V);
            ids[r * k + j] = id;
            top[r * k + j] = t[r * V + id];
            dense[r * V + id] = t[r * V + id];
        }
    ThreadPool pool(2);
    std::vector<float> a = z, b = z;
    const double la = distill_loss_fused_topk(a.data(), ids.data(), top.data(), k, y.data(), R, V,
                                              0.75f, 2.0f, pool);
    const double lb = distill_loss_fused(b.data(), dense.data(), y.data(), R, V, 0.75f, 2.0f, pool);
    EXPECT_NEAR(la, lb, 1e-12);
    for (int64_t i = 0; i < R * V; ++i) EXPECT_NEAR(a[i], b[i], 1e-7) << i;
}

}  // namespace
}  // namespace syslm::kernels
