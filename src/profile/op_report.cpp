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

// The matmuls as one group: together they usually decide the speed.
struct MatmulGroup {
    double seconds = 0, limit_seconds = 0;
    bool memory_bound = true;
};

MatmulGroup matmul_group(const std::vector<profiler::OpStats>& stats, const ModelCosts& costs,
                         const ProbeResult& probe, int threads, double bw) {
    MatmulGroup g;
    double mem_s = 0, comp_s = 0;
    for (const profiler::OpStats& s : stats) {
        if (!is_matmul(s.name, costs)) continue;
        g.seconds += s.seconds;
        mem_s += s.bytes / bw;
        comp_s += s.flops / op_peak(costs, s.name, probe, threads);
    }
    g.memory_bound = mem_s >= comp_s;
    g.limit_seconds = std::max(mem_s, comp_s);
    return g;
}

// The sentence naming the bottleneck, from the rows (sorted, shares set) and the matmul group.
std::string bottleneck_sentence(const OpReport& r, const MatmulGroup& mm, double total) {
    const OpRow& top = r.rows.front();
    char buf[512];
    std::string out;
    if (mm.seconds > 0.5 * total) {
        const double frac = mm.limit_seconds / mm.seconds;
        const bool mem = mm.memory_bound;
        std::snprintf(buf, sizeof buf,
                      "%s: the matrix multiplications take %s of the time and are %s-bound, "
                      "running at %s of the %s (%s: %s of the time, %s of its limit)",
                      r.phase.c_str(), pct(mm.seconds / total).c_str(), mem ? "memory" : "compute",
                      pct(frac).c_str(), mem ? "read bandwidth" : "arithmetic peak of their types",
                      top.op.c_str(), pct(top.share).c_str(), pct(top.limit_fraction).c_str());
        out = buf;
        if (frac < 0.6)
            out += mem ? ", so the weight-streaming kernels, not DRAM, are the bottleneck"
                       : ", so the matmul kernels' arithmetic efficiency is the bottleneck";
        else
            out += mem ? ", so memory bandwidth is the bottleneck"
                       : ", so the arithmetic units are the bottleneck";
    } else {
        std::snprintf(buf, sizeof buf,
                      "%s: the largest op is %s with %s of the time at %s of its %s limit, and "
                      "the matrix multiplications take only %s",
                      r.phase.c_str(), top.op.c_str(), pct(top.share).c_str(),
                      pct(top.limit_fraction).c_str(), top.memory_bound ? "memory" : "compute",
                      pct(mm.seconds / total).c_str());
        out = buf;
    }
    const double outside = total > 0 ? 1 - r.profiled_seconds / total : 0;
    if (outside > 0.1) {
        std::snprintf(buf, sizeof buf,
                      "; %s of the wall time is outside the profiled ops (thread hand-offs, "
                      "sampling, bookkeeping)",
                      pct(outside).c_str());
        out += buf;
    }
    return out + ".";
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
    r.bottleneck = r.rows.empty() ? "No op was profiled."
                                  : bottleneck_sentence(
                                        r, matmul_group(stats, costs, probe, threads, bw), total);
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
