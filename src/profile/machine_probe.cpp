#include "profile/machine_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/cpu_features.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "core/thread_pool.hpp"
#include "core/utc_time.hpp"
#include "kernels/cpu/peak.hpp"
#include "kernels/isa.hpp"
#include "profile/compute_peak.hpp"
#include "profile/memory_bandwidth.hpp"

namespace syslm::profile {
namespace {

double between(double one, double all, int all_threads, int n) {
    if (n <= 1 || all_threads <= 1) return one;
    if (n >= all_threads) return all;
    return one + (all - one) * static_cast<double>(n - 1) / (all_threads - 1);
}

int hardware_threads() {
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

double ProbeResult::read_gbs_for(int n) const {
    return between(read_gbs_1, read_gbs, threads, n);
}
double ProbeResult::fma_f32_for(int n) const {
    return between(fma_f32_1, fma_f32, threads, n);
}
double ProbeResult::bf16_for(int n) const {
    return between(bf16_1, bf16, threads, n);
}
double ProbeResult::amx_bf16_for(int n) const {
    return between(amx_bf16_1, amx_bf16, threads, n);
}

double ProbeResult::int8_for(int n) const {
    return between(int8_1, int8, threads, n);
}

ProbeResult run_probe(const ProbeOptions& opt) {
    ProbeResult r;
    const CpuFeatures& f = cpu_features();
    r.cpu = f.brand.empty() ? f.vendor : f.brand;
    r.hw_threads = hardware_threads();
    r.threads = opt.threads > 0 ? opt.threads : r.hw_threads;
    r.isa = kernels::isa_name(kernels::active_isa());
    r.features = f.summary();
    r.caches = cpu_caches();
    r.measured_at = utc_now();

    ThreadPool one(1), all(r.threads);
    r.read_gbs_1 = measure_read_bandwidth(one, opt.read_bytes, opt.passes);
    r.read_gbs = measure_read_bandwidth(all, opt.read_bytes, opt.passes);
    r.read_gbs_small_pages = measure_read_bandwidth(all, opt.read_bytes, opt.passes, Pages::Small);
    r.copy_gbs_1 = measure_copy_bandwidth(one, opt.copy_bytes, opt.passes);
    r.copy_gbs = measure_copy_bandwidth(all, opt.copy_bytes, opt.passes);

    const kernels::PeakKernels& k = kernels::peak_kernels();
    const ComputePeak fma = measure_compute_peak(k.fma_f32, all);
    r.fma_f32_1 = fma.per_core * 1e-9;
    r.fma_f32 = fma.all_cores * 1e-9;
    r.fma_f32_insn = k.fma_f32_insn;
    if (k.dot_bf16) {
        const ComputePeak bf = measure_compute_peak(k.dot_bf16, all);
        r.bf16_1 = bf.per_core * 1e-9;
        r.bf16 = bf.all_cores * 1e-9;
        r.bf16_insn = k.dot_bf16_insn;
    }
    const ComputePeak i8 = measure_compute_peak(k.dot_int8, all);
    r.int8_1 = i8.per_core * 1e-9;
    r.int8 = i8.all_cores * 1e-9;
    r.int8_insn = k.dot_int8_insn;
    if (k.tile_bf16) {
        const ComputePeak t = measure_compute_peak(k.tile_bf16, all);
        r.amx_bf16_1 = t.per_core * 1e-9;
        r.amx_bf16 = t.all_cores * 1e-9;
    }
    if (k.tile_int8) {
        const ComputePeak t = measure_compute_peak(k.tile_int8, all);
        r.amx_int8_1 = t.per_core * 1e-9;
        r.amx_int8 = t.all_cores * 1e-9;
    }
    return r;
}

nlohmann::json to_json(const ProbeResult& r) {
    nlohmann::json caches = nlohmann::json::array();
    for (const CacheLevel& c : r.caches)
        caches.push_back(
            {{"level", c.level}, {"type", c.type}, {"bytes", c.bytes}, {"instances", c.instances}});
    return {{"cpu", r.cpu},
            {"threads", r.threads},
            {"hw_threads", r.hw_threads},
            {"isa", r.isa},
            {"features", r.features},
            {"caches", caches},
            {"read_gbs", r.read_gbs},
            {"read_gbs_1", r.read_gbs_1},
            {"read_gbs_small_pages", r.read_gbs_small_pages},
            {"copy_gbs", r.copy_gbs},
            {"copy_gbs_1", r.copy_gbs_1},
            {"fma_f32_gflops", r.fma_f32},
            {"fma_f32_gflops_1", r.fma_f32_1},
            {"bf16_gflops", r.bf16},
            {"bf16_gflops_1", r.bf16_1},
            {"int8_gops", r.int8},
            {"int8_gops_1", r.int8_1},
            {"amx_bf16_gflops", r.amx_bf16},
            {"amx_bf16_gflops_1", r.amx_bf16_1},
            {"amx_int8_gops", r.amx_int8},
            {"amx_int8_gops_1", r.amx_int8_1},
            {"fma_f32_insn", r.fma_f32_insn},
            {"bf16_insn", r.bf16_insn},
            {"int8_insn", r.int8_insn},
            {"measured_at", r.measured_at}};
}

ProbeResult probe_from_json(const nlohmann::json& j) {
    try {
        ProbeResult r;
        r.cpu = j.at("cpu").get<std::string>();
        r.threads = j.at("threads").get<int>();
        r.hw_threads = j.at("hw_threads").get<int>();
        r.isa = j.at("isa").get<std::string>();
        r.features = j.at("features").get<std::string>();
        for (const auto& c : j.at("caches"))
            r.caches.push_back({c.at("level").get<int>(), c.at("type").get<std::string>(),
                                c.at("bytes").get<size_t>(), c.at("instances").get<int>()});
        r.read_gbs = j.at("read_gbs").get<double>();
        r.read_gbs_1 = j.at("read_gbs_1").get<double>();
        r.read_gbs_small_pages = j.at("read_gbs_small_pages").get<double>();
        r.copy_gbs = j.at("copy_gbs").get<double>();
        r.copy_gbs_1 = j.at("copy_gbs_1").get<double>();
        r.fma_f32 = j.at("fma_f32_gflops").get<double>();
        r.fma_f32_1 = j.at("fma_f32_gflops_1").get<double>();
        r.bf16 = j.at("bf16_gflops").get<double>();
        r.bf16_1 = j.at("bf16_gflops_1").get<double>();
        r.int8 = j.at("int8_gops").get<double>();
        r.int8_1 = j.at("int8_gops_1").get<double>();
        // Entries written before the AMX peaks were measured are stale: measured again.
        SYSLM_CHECK(j.contains("amx_bf16_gflops"), "written before the AMX peaks were measured");
        r.amx_bf16 = j.at("amx_bf16_gflops").get<double>();
        r.amx_bf16_1 = j.at("amx_bf16_gflops_1").get<double>();
        r.amx_int8 = j.at("amx_int8_gops").get<double>();
        r.amx_int8_1 = j.at("amx_int8_gops_1").get<double>();
        r.fma_f32_insn = j.at("fma_f32_insn").get<std::string>();
        r.bf16_insn = j.at("bf16_insn").get<std::string>();
        r.int8_insn = j.at("int8_insn").get<std::string>();
        r.measured_at = j.at("measured_at").get<std::string>();
        SYSLM_CHECK(r.threads > 0 && r.read_gbs > 0 && r.fma_f32 > 0, "implausible figures");
        return r;
    } catch (const nlohmann::json::exception& e) {
        fail("probe cache entry: ", e.what());
    }
}

std::string probe_cache_path() {
    namespace fs = std::filesystem;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
        return (fs::path(x) / "syslm" / "probe.json").string();
    const char* home = std::getenv("HOME");
    return (fs::path(home && *home ? home : "/tmp") / ".cache" / "syslm" / "probe.json").string();
}

std::string probe_cache_key(int threads) {
    const CpuFeatures& f = cpu_features();
    return (f.brand.empty() ? f.vendor : f.brand) + " | " +
           std::to_string(threads > 0 ? threads : hardware_threads()) + " threads | " +
           kernels::isa_name(kernels::active_isa());
}

namespace {
nlohmann::json read_cache_file() {
    std::ifstream in(probe_cache_path());
    if (!in) return nlohmann::json::object();
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? j : nlohmann::json::object();
}
}  // namespace

std::optional<ProbeResult> load_cached_probe(int threads) {
    const nlohmann::json j = read_cache_file();
    const auto it = j.find(probe_cache_key(threads));
    if (it == j.end()) return std::nullopt;
    try {
        return probe_from_json(*it);
    } catch (const Error&) {
        return std::nullopt;
    }
}

void save_cached_probe(const ProbeResult& r) {
    namespace fs = std::filesystem;
    const std::string path = probe_cache_path();
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    SYSLM_CHECK(!ec, fs::path(path).parent_path().string(),
                ": cannot create the cache directory: ", ec.message());
    nlohmann::json j = read_cache_file();
    j[probe_cache_key(r.threads)] = to_json(r);
    write_file_atomically(path, j.dump(2) + "\n");
}

ProbeResult cached_or_measured_probe(int threads, bool refresh, bool* measured) {
    if (!refresh) {
        if (auto cached = load_cached_probe(threads)) {
            if (measured) *measured = false;
            return *cached;
        }
    }
    ProbeOptions opt;
    opt.threads = threads;
    ProbeResult r = run_probe(opt);
    save_cached_probe(r);
    if (measured) *measured = true;
    return r;
}

}  // namespace syslm::profile
