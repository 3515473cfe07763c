// `syslm probe`: this machine's limits, measured with the engine's own kernels, and a small cache
// file so that `syslm bench` can compare against them without measuring every time.
//
// Cache: $XDG_CACHE_HOME/syslm/probe.json (default ~/.cache/syslm/probe.json), one entry per key
// "<cpu brand> | <n> threads | <isa>"; deleting the file is always safe.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "profile/cpu_caches.hpp"

namespace syslm::profile {

struct ProbeResult {
    std::string cpu;       // CPUID brand string
    int threads = 0;       // threads measured with ("all cores")
    int hw_threads = 0;    // std::thread::hardware_concurrency()
    std::string isa;       // kernels::active_isa()
    std::string features;  // cpu_features().summary()
    std::vector<CacheLevel> caches;
    // GB/s; "_1": one thread.
    double read_gbs = 0, read_gbs_1 = 0;  // huge-page buffers: the memory system's limit
    double read_gbs_small_pages = 0;      // all threads, 4 KiB pages (as mmap'd weights)
    double copy_gbs = 0, copy_gbs_1 = 0;
    // GFLOP/s (or GOP/s for int8); 0 when the kernel does not exist on this ISA.
    double fma_f32 = 0, fma_f32_1 = 0;
    double bf16 = 0, bf16_1 = 0;
    double int8 = 0, int8_1 = 0;
    double amx_bf16 = 0, amx_bf16_1 = 0;  // AMX tiles; 0 where absent
    double amx_int8 = 0, amx_int8_1 = 0;
    std::string fma_f32_insn, bf16_insn, int8_insn;
    std::string measured_at;  // UTC, ISO 8601

    // The figure for `n` threads: measured values for 1 and `threads`, linear in between.
    double read_gbs_for(int n) const;
    double fma_f32_for(int n) const;
    double bf16_for(int n) const;
    double int8_for(int n) const;
    double amx_bf16_for(int n) const;
};

struct ProbeOptions {
    int threads = 0;                      // 0: all hardware threads
    size_t read_bytes = size_t{1} << 29;  // read-bandwidth buffer (16x a large L3)
    size_t copy_bytes = size_t{1} << 28;  // each of the two copy buffers
    int passes = 8;                       // best of
};

// Measures everything (takes a few seconds).
ProbeResult run_probe(const ProbeOptions& opt = {});

nlohmann::json to_json(const ProbeResult& r);
ProbeResult probe_from_json(const nlohmann::json& j);  // throws Error on a malformed entry

std::string probe_cache_path();
std::string probe_cache_key(int threads);
// The cached result for this machine, if any (a corrupt cache file counts as absent).
std::optional<ProbeResult> load_cached_probe(int threads);
// Adds or replaces this machine's entry; throws Error if the file cannot be written.
void save_cached_probe(const ProbeResult& r);
// The cached result, or a fresh measurement that is then cached. *measured says which.
ProbeResult cached_or_measured_probe(int threads, bool refresh, bool* measured = nullptr);

}  // namespace syslm::profile
