#include "tune/train_search.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <ostream>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "tune/confirmation.hpp"

namespace syslm::tune {
namespace {

std::string describe(const TrainSettings& s, int threads) {
    return cat("micro-batch ", s.micro_batch, " x ", s.accum, ", recompute ", s.recompute, ", ",
               s.precision, ", ", threads, " threads");
}

TrainTrial run_trial(const TrainMeasureFn& measure, const TrainSettings& s, int threads) {
    TrainTrial t;
    t.settings = s;
    t.threads = threads;
    try {
        t.m = measure(s, threads);
    } catch (const Error& e) {
        t.error = e.what();
    }
    return t;
}

// Whether the trial fits the memory limit and has the command's loss curve: every step's loss
// within the order-of-sums bound (or, in the other precision, the user's --max-loss-change).
void judge(TrainTrial& t, const TrainTrial& base, const TrainSearchOptions& o) {
    if (!t.error.empty()) return;
    t.fits = t.m.peak_rss_mib <= o.memory_limit_mib;
    const double rtol = t.settings.precision == base.settings.precision
                            ? o.loss_rtol
                            : std::max(o.loss_rtol, o.precision_rtol);
    t.same_curve = t.m.losses.size() == base.m.losses.size();
    for (size_t i = 0; t.same_curve && i < t.m.losses.size(); ++i)
        t.same_curve = std::abs(t.m.losses[i] - base.m.losses[i]) <= rtol * std::abs(base.m.losses[i]);
}

// Every grid point but the command's own: a divisor of the global batch as micro-batch, each
// recompute policy, thread count (powers of two and the most) and precision.
std::vector<std::pair<TrainSettings, int>> training_grid(const TrainSearchOptions& o, int global) {
    std::vector<int> threads;
    for (int t = 1; t < o.max_threads; t *= 2) threads.push_back(t);
    threads.push_back(o.max_threads);
    std::vector<std::string> precisions = o.precisions;
    if (std::find(precisions.begin(), precisions.end(), o.baseline.precision) == precisions.end())
        precisions.insert(precisions.begin(), o.baseline.precision);
    std::vector<std::pair<TrainSettings, int>> grid;
    for (const std::string& precision : precisions)
        for (int mb = 1; mb <= global; ++mb) {
            if (global % mb) continue;
            for (const char* recompute : {"none", "selective", "full"})
                for (int th : threads) {
                    TrainSettings s = o.baseline;
                    s.micro_batch = mb;
                    s.accum = global / mb;
                    s.recompute = recompute;
                    s.precision = precision;
                    if (!(s == o.baseline && th == o.baseline_threads)) grid.emplace_back(s, th);
                }
        }
    return grid;
}

// The command's settings and the best trial timed alternately; their medians replace the
// single timings, and the best stays only if it still wins (tune/confirmation.hpp).
void confirm(TrainSearchResult& r, const TrainMeasureFn& measure, const TrainSearchOptions& o,
             const std::function<void(const std::string&)>& say) {
    std::vector<double> ts[2], rss[2];
    for (int rep = 0; rep < o.confirm_reps; ++rep)
        for (int i = 0; i < 2; ++i) {
            const TrainTrial& c = i == 0 ? r.baseline : r.best;
            const TrainTrial t = run_trial(measure, c.settings, c.threads);
            if (!t.error.empty()) continue;
            ts[i].push_back(t.m.tokens_per_s);
            rss[i].push_back(t.m.peak_rss_mib);
        }
    for (int i = 0; i < 2; ++i) {
        if (ts[i].empty()) continue;
        TrainTrial& out = i == 0 ? r.baseline : r.best;
        out.m.tokens_per_s = median(ts[i]);
        out.m.peak_rss_mib = *std::max_element(rss[i].begin(), rss[i].end());
        out.fits = out.m.peak_rss_mib <= o.memory_limit_mib;
    }
    if (!tuned_wins(r.baseline.m.tokens_per_s, r.best.m.tokens_per_s, r.best.fits, o.confirm_reps,
                    say))
        r.best = r.baseline;
}

}  // namespace

double loss_order_bound(int steps, double n) {
    return std::max(1e-6, 2.0 * steps * std::sqrt(n) * std::ldexp(1.0, -24));
}

TrainSearchResult search_training(const TrainMeasureFn& measure, const TrainSearchOptions& o) {
    const int global = o.baseline.micro_batch * o.baseline.accum;
    SYSLM_CHECK(global >= 1 && o.max_threads >= 1, "train search: global batch and threads >= 1");
    TrainSearchResult r;
    const std::function<void(const std::string&)> say = [&](const std::string& line) {
        if (o.log) *o.log << "tune: train: " << line << std::endl;
    };
    TrainTrial base = run_trial(measure, o.baseline, o.baseline_threads);
    SYSLM_CHECK(base.error.empty(), "tune train: the command's own settings do not run: ",
                base.error);
    SYSLM_CHECK(base.m.peak_rss_mib <= o.memory_limit_mib, "tune train: the command's own ",
                "settings peak at ", base.m.peak_rss_mib, " MiB, over the limit of ",
                o.memory_limit_mib, " MiB");
    base.fits = base.same_curve = true;
    say(cat(describe(base.settings, base.threads), " (the command's own): ", base.m.tokens_per_s,
            " tok/s, peak ", base.m.peak_rss_mib, " MiB"));
    r.trials.push_back(base);
    TrainTrial best = base;
    for (const auto& [s, th] : training_grid(o, global)) {
        TrainTrial t = run_trial(measure, s, th);
        judge(t, base, o);
        say(cat(describe(s, th), ": ",
                !t.error.empty() ? t.error
                                 : cat(t.m.tokens_per_s, " tok/s, peak ", t.m.peak_rss_mib, " MiB",
                                       t.fits ? "" : " (over the limit)",
                                       t.same_curve ? "" : " (another loss curve)")));
        if (t.counts() && t.m.tokens_per_s > best.m.tokens_per_s) best = t;
        r.trials.push_back(t);
    }
    r.baseline = base;
    r.best = best;
    if (!(best.settings == base.settings && best.threads == base.threads)) confirm(r, measure, o, say);
    return r;
}

}  // namespace syslm::tune
