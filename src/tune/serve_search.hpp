// The runtime half of the serve goal: engine settings (threads, parallel sequences, token budget
// per step, KV page size and element type) searched by coordinate descent from `syslm serve`'s
// defaults. Each trial is a real load (tune/serve_load.hpp); a trial counts only when its p99
// TTFT and inter-token latency meet the limits. The search then times the default and the best
// alternately, so that both see the same stretch of the machine, and reports their medians.
#pragma once

#include <functional>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

#include "tune/plan.hpp"
#include "tune/serve_load.hpp"

namespace syslm::tune {

struct ServeTrial {
    ServeSettings settings;
    int threads = 0;  // resolved (>= 1)
    ServeMeasurement m;
    bool meets_limits = false;
    std::string error;  // the load could not run with these settings
};

struct ServeSearchOptions {
    int streams = 16;
    int max_threads = 1;
    double max_ttft_p99 = std::numeric_limits<double>::infinity();  // seconds
    double max_itl_p99 = std::numeric_limits<double>::infinity();
    int passes = 2;          // coordinate-descent sweeps over the knobs
    int confirm_reps = 3;    // alternating timings of the default and the best
    double min_gain = 1.02;  // a move must beat the current best by this factor (noise)
    std::ostream* log = nullptr;
};

struct ServeSearchResult {
    ServeTrial baseline, best;   // confirmed figures (medians of the alternating timings)
    std::vector<ServeTrial> trials;  // every trial of the search, in order
};

// `measure` runs the load with the settings and thread count (it may throw Error: the trial is
// then recorded as failed); `again` asks for a fresh timing where it might answer from a cache.
// Baseline: ServeSettings{} at max_threads.
using ServeMeasureFn =
    std::function<ServeMeasurement(const ServeSettings&, int threads, bool again)>;
ServeSearchResult search_serving(const ServeMeasureFn& measure, const ServeSearchOptions& o);

}  // namespace syslm::tune
