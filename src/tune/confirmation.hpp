// The last step of the runtime searches (serve, train): the default and the best setting timed
// alternately, so that a slow stretch of the machine hits both alike, and the medians decide.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace syslm::tune {

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// True when the tuned setting's confirmed median beats the default's and it holds the limits
// (the search's single timings can flatter a setting); says which way it went.
inline bool tuned_wins(double default_ts, double tuned_ts, bool tuned_ok, int reps,
                       const std::function<void(const std::string&)>& say) {
    if (tuned_ts <= default_ts || !tuned_ok) {
        say(cat("confirmed: ", tuned_ts, " tok/s tuned against ", default_ts,
                " tok/s default: the default settings stay"));
        return false;
    }
    say(cat("confirmed (median of ", reps, " alternating runs): default ", default_ts,
            " tok/s, tuned ", tuned_ts, " tok/s (", tuned_ts / std::max(1e-9, default_ts), "x)"));
    return true;
}

}  // namespace syslm::tune
