#include "profile/op_report.hpp"

#include <algorithm>
#include <cstdio>

namespace syslm::profile {
namespace {

std::string pct(double f) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f%%", 100 * f);
    return b;
}

bool is_matmul(const std::string& op, const ModelCosts& c) {
    for (const MatrixCost& m : c.matrices)
        if (m.op == op) return true;
    return false;
}

}  // namespace

OpReport make_op_report(std::string phase, const std::vector<profiler::OpStats>& stats,
                        double wall_seconds, const ModelCosts& costs, const ProbeResult& probe,
                        int threads) {
    OpReport r;
    r.phase = std::move(phase);
    r.wall_seconds = wall_seconds;
    const double bw = probe.read_gbs_for(threads) * 1e9;
    for (const profiler::OpStats& s : stats) {
        OpRow row;
        row.op = s.name;
        row.calls = s.calls;
        row.seconds = s.seconds;
        r.profiled_seconds += s.seconds;
        if (s.seconds > 0) {
            row.gbs = s.bytes / s.seconds * 1e-9;
            row.gflops = s.flops / s.seconds * 1e-9;
            const double t_mem = s.bytes / bw;
            const double t_comp = s.flops / op_peak(costs, s.name, probe, threads);
            row.memory_bound = t_mem >= t_comp;
            row.limit_fraction = std::max(t_mem, t_comp) / s.seconds;
        }
        r.rows.push_back(row);
    }
    const double total = std::max(wall_seconds, r.profiled_seconds);
    for (OpRow& row : r.rows) row.share = total > 0 ? row.seconds / total : 0;
    std::sort(r.rows.begin(), r.rows.end(),
              [](const OpRow& a, const OpRow& b) { return a.seconds > b.seconds; });

    if (r.rows.empty()) {
        r.bottleneck = "No op was profiled.";
        return r;
    }
    // The matmuls as one group: together they usually decide the speed.
    double mm_s = 0, mm_limit_s = 0;
    bool mm_mem = true;
    double mm_mem_s = 0, mm_comp_s = 0;
    for (const profiler::OpStats& s : stats) {
        if (!is_matmul(s.name, costs)) continue;
        mm_s += s.seconds;
        mm_mem_s += s.bytes / bw;
        mm_comp_s += s.flops / op_peak(costs, s.name, probe, threads);
    }
    mm_mem = mm_mem_s >= mm_comp_s;
    mm_limit_s = std::max(mm_mem_s, mm_comp_s);
    const OpRow& top = r.rows.front();
    char buf[512];
    const double outside = total > 0 ? 1 - r.profiled_seconds / total : 0;
    if (mm_s > 0.5 * total) {
        const double frac = mm_limit_s / mm_s;
        std::snprintf(buf, sizeof buf,
                      "%s: the matrix multiplications take %s of the time and are %s-bound, "
                      "running at %s of the %s (%s: %s of the time, %s of its limit)",
                      r.phase.c_str(), pct(mm_s / total).c_str(), mm_mem ? "memory" : "compute",
                      pct(frac).c_str(),
                      mm_mem ? "read bandwidth" : "arithmetic peak of their types", top.op.c_str(),
                      pct(top.share).c_str(), pct(top.limit_fraction).c_str());
        r.bottleneck = buf;
        if (frac < 0.6)
            r.bottleneck += mm_mem
                                ? ", so the weight-streaming kernels, not DRAM, are the bottleneck"
                                : ", so the matmul kernels' arithmetic efficiency is the "
                                  "bottleneck";
        else
            r.bottleneck += mm_mem ? ", so memory bandwidth is the bottleneck"
                                   : ", so the arithmetic units are the bottleneck";
    } else {
        std::snprintf(buf, sizeof buf,
                      "%s: the largest op is %s with %s of the time at %s of its %s limit, and "
                      "the matrix multiplications take only %s",
                      r.phase.c_str(), top.op.c_str(), pct(top.share).c_str(),
                      pct(top.limit_fraction).c_str(), top.memory_bound ? "memory" : "compute",
                      pct(mm_s / total).c_str());
        r.bottleneck = buf;
    }
    if (outside > 0.1) {
        std::snprintf(buf, sizeof buf,
                      "; %s of the wall time is outside the profiled ops (thread hand-offs, "
                      "sampling, bookkeeping)",
                      pct(outside).c_str());
        r.bottleneck += buf;
    }
    r.bottleneck += ".";
    return r;
}

std::string format_op_report(const OpReport& r) {
    std::string out;
    char line[256];
    std::snprintf(line, sizeof line, "%-16s %8s %10s %7s %9s %10s %12s\n", "op", "calls", "time ms",
                  "time %", "GB/s", "GFLOP/s", "% of limit");
    out += line;
    for (const OpRow& row : r.rows) {
        std::snprintf(line, sizeof line, "%-16s %8llu %10.2f %6.1f%% %9.1f %10.1f %7.0f%% %s\n",
                      row.op.c_str(), static_cast<unsigned long long>(row.calls), row.seconds * 1e3,
                      100 * row.share, row.gbs, row.gflops, 100 * row.limit_fraction,
                      row.memory_bound ? "mem" : "flop");
        out += line;
    }
    const double other = std::max(0.0, r.wall_seconds - r.profiled_seconds);
    std::snprintf(
        line, sizeof line, "%-16s %8s %10.2f %6.1f%%\n", "(not profiled)", "", other * 1e3,
        r.wall_seconds > 0 ? 100 * other / std::max(r.wall_seconds, r.profiled_seconds) : 0.0);
    out += line;
    return out;
}

}  // namespace syslm::profile
