// The mixture search of `syslm data mix --search regmix` (RegMix, Liu et al. 2024): small proxy
// models trained by syslm on mixtures of random weights, a regression from the weights to their
// validation loss, and the mixture it predicts best.
//
// Runs. Run i draws stratum weights from a Dirichlet around a prior (the midpoint of the
// strata's natural token shares and the uniform mixture; RegMix uses the token shares alone,
// which leaves small strata unexplored) with concentration K x prior x {0.5, 1, 2} in turn, so
// some runs sit near a corner and some near the prior; writes that mixture (the budget the proxy
// reads: steps x batch x seq tokens) under OUT/search/run_i, and trains a proxy from scratch on
// it with `syslm train` (same seed every run, so the mixture is the only difference), its val
// loss measured on the mixed validation set at the end.
//
// Fit. Ridge regression of the val loss on the weights and their logarithms, log(w + 0.01):
// each stratum's share helps with diminishing returns and its loss climbs steeply as the share
// nears zero (the data-mixing-law shape), so the model places the optimum inside the simplex and
// fits the runs near a corner without bending the middle. On the 16 runs of the README's bench
// its leave-one-out error was 0.06 nats against 0.31 for a quadratic in the weights. The ridge
// (1e-3 per run) acts on standardized features and a centred loss. Reported with its R^2 on the
// runs and its leave-one-out error.
//
// Choice. As RegMix: the mean of the 64 best-predicted of 20,000 weight vectors drawn from the
// same Dirichlet, so the choice stays where the runs sampled.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace syslm::curate {

struct ProxySpec {
    int layers = 2, dim = 128, heads = 4, steps = 300, seq = 64, batch = 8;
    double lr = 2e-3;
};
// "layers=2,dim=128,steps=300" (also heads, seq, batch, lr); throws Error naming a bad key.
ProxySpec parse_proxy(const std::string& spec);

struct SearchRun {
    std::vector<double> weights;  // per stratum, summing to 1
    double val_loss = 0;
};

// val loss ~ linear in the weights and their logarithms (see the top of the file).
struct MixtureModel {
    static constexpr double kLogFloor = 0.01;  // log(w + floor): finite at w = 0
    int k = 0;
    std::vector<double> coef;  // over features(w)
    double r2 = 0, loo_rmse = 0;
    static std::vector<double> features(const std::vector<double>& w);
    double predict(const std::vector<double>& w) const;
};
MixtureModel fit_mixture_model(const std::vector<SearchRun>& runs);

// Dirichlet(alpha) from a seeded generator of its own (Marsaglia-Tsang gammas).
class Dirichlet {
public:
    explicit Dirichlet(uint64_t seed) : state_(seed) {}
    std::vector<double> draw(const std::vector<double>& alpha);

private:
    double uniform();  // (0, 1)
    double normal();
    double gamma(double shape);
    uint64_t state_;
};

// The weights run i tries (prior: the strata's natural shares).
std::vector<double> run_weights(const std::vector<double>& prior, int run, uint64_t seed);
// The mean of the `top` best-predicted of `candidates` draws around the prior.
std::vector<double> best_mixture(const MixtureModel& m, const std::vector<double>& prior,
                                 uint64_t seed, int candidates = 20000, int top = 64);

}  // namespace syslm::curate
