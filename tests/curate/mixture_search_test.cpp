// The mixture search's parts (curate/mixture_search.hpp): Dirichlet draws (their means and the
// spread the concentration sets, within bounds from the distribution's own variance), distinct
// weights per run, the quadratic fit recovering a known loss surface exactly, and the choice
// landing at that surface's interior minimum.
#include "curate/mixture_search.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>

namespace syslm::curate {
namespace {

TEST(MixtureSearch, DirichletDrawsHaveTheDistributionsMeansAndVariances) {
    const std::vector<double> alpha{0.4, 1.0, 2.6};
    const double a0 = 4.0;
    const int n = 20000;
    Dirichlet d(7);
    std::vector<double> sum(3, 0.0), sq(3, 0.0);
    for (int i = 0; i < n; ++i) {
        const std::vector<double> w = d.draw(alpha);
        EXPECT_NEAR(std::accumulate(w.begin(), w.end(), 0.0), 1.0, 1e-12);
        for (size_t j = 0; j < 3; ++j) {
            EXPECT_GT(w[j], 0.0);
            sum[j] += w[j];
            sq[j] += w[j] * w[j];
        }
    }
    for (size_t j = 0; j < 3; ++j) {
        const double mean = alpha[j] / a0, var = mean * (1 - mean) / (a0 + 1);
        // the sample mean within 5 standard errors; the sample variance within 10%
        EXPECT_NEAR(sum[j] / n, mean, 5 * std::sqrt(var / n)) << j;
        EXPECT_NEAR(sq[j] / n - (sum[j] / n) * (sum[j] / n), var, 0.1 * var) << j;
    }
}

TEST(MixtureSearch, RunsTryDistinctWeights) {
    const std::vector<double> prior{0.9, 0.1};
    std::set<std::vector<double>> seen;
    for (int i = 0; i < 12; ++i) {
        const std::vector<double> w = run_weights(prior, i, 3);
        ASSERT_EQ(w.size(), 2u);
        EXPECT_TRUE(seen.insert(w).second) << "run " << i << " repeats a mixture";
    }
    EXPECT_EQ(run_weights(prior, 5, 3), run_weights(prior, 5, 3));  // seeded
}

// loss(w) = 3 - 2 w0 + 4 (w0 - 0.3)^2 + w1 w2 over three strata: a quadratic in the features
double surface(const std::vector<double>& w) {
    return 3 - 2 * w[0] + 4 * (w[0] - 0.3) * (w[0] - 0.3) + w[1] * w[2];
}

TEST(MixtureSearch, TheFitRecoversAQuadraticAndTheChoiceItsMinimum) {
    const std::vector<double> prior{0.3, 0.3, 0.4};
    std::vector<SearchRun> runs;
    for (int i = 0; i < 40; ++i) {
        SearchRun r{run_weights(prior, i, 11), 0};
        r.val_loss = surface(r.weights);
        runs.push_back(r);
    }
    const MixtureModel m = fit_mixture_model(runs);
    EXPECT_GT(m.r2, 0.999);
    EXPECT_LT(m.loo_rmse, 0.01);
    for (int i = 0; i < 10; ++i) {
        const std::vector<double> w = run_weights(prior, 100 + i, 12);
        EXPECT_NEAR(m.predict(w), surface(w), 0.02);
    }
    // minimum of the surface on the simplex: w0 = 0.55 (d/dw0 of -2 w0 + 4 (w0 - 0.3)^2 = 0),
    // the rest split to make w1 w2 small: the choice has w0 near 0.55 and a lower loss than the
    // prior's
    const std::vector<double> best = best_mixture(m, prior, 5);
    EXPECT_NEAR(best[0], 0.55, 0.08);
    EXPECT_LT(surface(best), surface(prior));
}

TEST(MixtureSearch, ProxySpecsAreParsedAndBadOnesNamed) {
    const ProxySpec p = parse_proxy("layers=3,dim=64,heads=2,steps=50,lr=0.01");
    EXPECT_EQ(p.layers, 3);
    EXPECT_EQ(p.dim, 64);
    EXPECT_EQ(p.heads, 2);
    EXPECT_EQ(p.steps, 50);
    EXPECT_DOUBLE_EQ(p.lr, 0.01);
    EXPECT_THROW(parse_proxy("depth=3"), std::exception);
    EXPECT_THROW(parse_proxy("dim=-4"), std::exception);
    EXPECT_THROW(parse_proxy("dim=30,heads=4"), std::exception);
}

}  // namespace
}  // namespace syslm::curate
