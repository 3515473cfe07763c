// The per-op table of `syslm bench --profile`: each op's share of the time, the bandwidth and
// arithmetic rate it achieved, and how close it came to the limit that binds it (memory
// bandwidth or the arithmetic peak of its types, whichever needs more time), plus one sentence
// that names the bottleneck.
#pragma once

#include <string>
#include <vector>

#include "core/profiler.hpp"
#include "profile/machine_probe.hpp"
#include "profile/model_costs.hpp"

namespace syslm::profile {

struct OpRow {
    std::string op;
    uint64_t calls = 0;
    double seconds = 0;
    double share = 0;  // of the wall time
    double gbs = 0, gflops = 0;
    bool memory_bound = true;   // the memory limit needs more time than the arithmetic one
    double limit_fraction = 0;  // time at the binding limit / measured time
};

struct OpReport {
    std::string phase;        // "prefill pp512", "decode tg128"
    std::vector<OpRow> rows;  // by time, largest first
    double wall_seconds = 0, profiled_seconds = 0;
    std::string bottleneck;  // one sentence
};

OpReport make_op_report(std::string phase, const std::vector<profiler::OpStats>& stats,
                        double wall_seconds, const ModelCosts& costs, const ProbeResult& probe,
                        int threads);
std::string format_op_report(const OpReport& r);

}  // namespace syslm::profile
