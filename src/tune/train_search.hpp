// The training goal: how a step's sequences are computed (micro-batch and accumulation with the
// same global batch, activation recompute, threads) searched over a grid of real training runs.
// A trial counts only when its peak memory fits the limit and its losses equal the default's
// step for step within the order-of-sums bound: the same global batch, seed and arithmetic,
// summed in another order, so the same loss curve. Precision changes the arithmetic, not only
// the order: it is searched only when the user gives a limit for the loss change it may make
// (precisions, precision_rtol), and a trial in another precision than the default's counts when
// every step's loss is within that limit. The default and the best are then timed alternately.
#pragma once

#include <functional>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

#include "tune/plan.hpp"

namespace syslm::tune {

struct TrainMeasurement {
    double tokens_per_s = 0;     // median over the steps after the first
    double peak_rss_mib = 0;
    std::vector<double> losses;  // per step
};

struct TrainTrial {
    TrainSettings settings;
    int threads = 0;
    TrainMeasurement m;
    bool fits = false, same_curve = false;
    std::string error;
    bool counts() const { return error.empty() && fits && same_curve; }
};

struct TrainSearchOptions {
    TrainSettings baseline;      // the command's own settings (its global batch: mb x accum)
    int baseline_threads = 1;
    int max_threads = 1;
    double memory_limit_mib = std::numeric_limits<double>::infinity();
    double loss_rtol = 0;        // per-step |loss - default| / default allowed
    // Precisions searched ("f32", "bf16"); empty: the baseline's only. A trial in another
    // precision than the baseline's may change each step's loss by precision_rtol (relative).
    std::vector<std::string> precisions;
    double precision_rtol = 0;
    int confirm_reps = 3;
    std::ostream* log = nullptr;
};

struct TrainSearchResult {
    TrainTrial baseline, best;  // confirmed figures (medians of alternating runs)
    std::vector<TrainTrial> trials;
};

// The relative loss difference two orders of summation may make after `steps` steps, for sums
// of at most n terms in float: 2 * steps * sqrt(n) * 2^-24 (the derivation is in
// tests/parallel/drift.hpp), and never below 1e-6.
double loss_order_bound(int steps, double n);

using TrainMeasureFn = std::function<TrainMeasurement(const TrainSettings&, int threads)>;
// Throws Error when the baseline cannot run or does not fit the memory limit.
TrainSearchResult search_training(const TrainMeasureFn& measure, const TrainSearchOptions& o);

}  // namespace syslm::tune
