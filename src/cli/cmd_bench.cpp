// syslm bench: prompt-processing and generation speed of a model as llama-bench measures them,
// each figure also as a fraction of this machine's roofline; --profile explains where the time
// goes, --trace records it for Perfetto.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "cli/cache_type_options.hpp"
#include "cli/command.hpp"
#include "core/cpu_features.hpp"
#include "core/error.hpp"
#include "core/profiler.hpp"
#include "core/utc_time.hpp"
#include "kernels/cpu/decode_streams.hpp"
#include "kernels/isa.hpp"
#include "profile/bench_runner.hpp"
#include "profile/machine_probe.hpp"
#include "profile/memory_bandwidth.hpp"
#include "profile/model_costs.hpp"
#include "profile/op_report.hpp"

namespace syslm::cli {
namespace {

struct BenchArgs {
    std::string model;
    int n_prompt = 512;
    int n_gen = 128;
    int threads = 2;
    int reps = 5;
    int n_batch = 2048;
    int n_depth = 0;
    CacheTypeArgs cache_type;
    bool json = false;
    bool profile = false;
    std::string trace;
};

// llama.cpp's names for general.file_type (llama_model_ftype_name).
std::string ftype_name(uint32_t ft) {
    switch (ft) {
        case 0:
            return "all F32";
        case 1:
            return "F16";
        case 2:
            return "Q4_0";
        case 3:
            return "Q4_1";
        case 7:
            return "Q8_0";
        case 8:
            return "Q5_0";
        case 9:
            return "Q5_1";
        case 10:
            return "Q2_K - Medium";
        case 11:
            return "Q3_K - Small";
        case 12:
            return "Q3_K - Medium";
        case 13:
            return "Q3_K - Large";
        case 14:
            return "Q4_K - Small";
        case 15:
            return "Q4_K - Medium";
        case 16:
            return "Q5_K - Small";
        case 17:
            return "Q5_K - Medium";
        case 18:
            return "Q6_K";
        case 21:
            return "Q2_K - Small";
        case 32:
            return "BF16";
        default:
            return "ftype " + std::to_string(ft);
    }
}

std::string params_label(double n) {
    char b[32];
    if (n >= 1e9)
        std::snprintf(b, sizeof b, "%.1fB", n / 1e9);
    else
        std::snprintf(b, sizeof b, "%.0fM", n / 1e6);
    return b;
}

std::string size_label(double bytes) {
    char b[32];
    if (bytes >= (1 << 30))
        std::snprintf(b, sizeof b, "%.2f GiB", bytes / (1 << 30));
    else
        std::snprintf(b, sizeof b, "%.2f MiB", bytes / (1 << 20));
    return b;
}

// One test's result with llama-bench's JSON fields (and the roofline's).
nlohmann::json bench_json(const BenchArgs& a, const profile::ProbeResult& probe,
                          const profile::ModelCosts& costs, const std::string& model_type,
                          const profile::BenchTest& test, const profile::BenchResult& r,
                          const std::string& test_time, double roof_ts, const char* basis,
                          double read_gbs) {
    return {
        {"build_commit", "syslm"},
        {"cpu_info", probe.cpu},
        {"gpu_info", ""},
        {"backends", "CPU"},
        {"isa", kernels::isa_name(kernels::active_isa())},
        {"model_filename", a.model},
        {"model_type", model_type},
        {"model_size", static_cast<uint64_t>(costs.model_bytes)},
        {"model_n_params", static_cast<uint64_t>(costs.n_params)},
        {"n_batch", a.n_batch},
        {"n_ubatch", std::min(a.n_batch, std::max(test.n_prompt, 1))},
        {"n_threads", a.threads},
        {"type_k", model::kv_cache_type_name(a.cache_type.types().k)},
        {"type_v", model::kv_cache_type_name(a.cache_type.types().v)},
        {"n_gpu_layers", 0},
        {"flash_attn", false},
        {"use_mmap", true},
        {"embeddings", false},
        {"n_prompt", test.n_prompt},
        {"n_gen", test.n_gen},
        {"n_depth", test.n_depth},
        {"test_time", test_time},
        {"avg_ns", static_cast<uint64_t>(r.avg_ns)},
        {"stddev_ns", static_cast<uint64_t>(r.stddev_ns)},
        {"avg_ts", r.avg_ts},
        {"stddev_ts", r.stddev_ts},
        {"samples_ns", r.samples_ns},
        {"samples_ts", r.samples_ts},
        {"roofline_ts", roof_ts},
        {"roofline_fraction", r.avg_ts / roof_ts},
        {"roofline_basis", basis},
        // decode's roof: the read bandwidth measured around the test, and the probe's figure
        {"read_gbs", read_gbs},
        {"read_gbs_probe", probe.read_gbs_for(a.threads)},
    };
}

// llama-bench's markdown table header, plus the roofline column.
void print_table_header() {
    std::printf("| %-28s | %10s | %7s | %7s | %7s | %8s | %16s | %7s |\n", "model", "size",
                "params", "backend", "threads", "test", "t/s", "of roof");
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", std::string(28, '-').c_str(),
                std::string(10, '-').c_str(), std::string(7, '-').c_str(),
                std::string(7, '-').c_str(), std::string(7, '-').c_str(),
                std::string(8, '-').c_str(), std::string(16, '-').c_str(),
                std::string(7, '-').c_str());
    std::fflush(stdout);
}

// What the "of roof" column is measured against, and where the figures come from.
// GB/s of the probe's read sum on `threads` threads now: 256 MiB, best of 4 passes (~0.1 s).
double read_bandwidth_now(int threads) {
    ThreadPool pool(threads);
    return profile::measure_read_bandwidth(pool, size_t{256} << 20, 4);
}

void print_roofline_note(const BenchArgs& a, const profile::ProbeResult& probe,
                         const profile::ModelCosts& costs, double bandwidth_now) {
    char amx[96] = "";
    if (probe.amx_bf16 > 0)
        std::snprintf(amx, sizeof amx, ", AMX BF16 tiles %.0f GFLOP/s",
                      probe.amx_bf16_for(a.threads));
    std::printf(
        "\nroofline: decode at %.1f GB/s read bandwidth (%s; the probe's: %.1f) / %.1f MB per "
        "token (weights touched + KV cache at mid-run); prefill at the peak of the units each "
        "weight type's GEMM "
        "was measured fastest on (%s: FP32 FMA %.0f, BF16 dot %.0f GFLOP/s%s; int8 %.0f GOP/s "
        "where no GEMM runs; %d threads), attention at the FP32 FMA peak, from `syslm probe` "
        "(%s).\n",
        bandwidth_now > 0 ? bandwidth_now : probe.read_gbs_for(a.threads),
        bandwidth_now > 0 ? "measured just before and after the test" : "no decode test",
        probe.read_gbs_for(a.threads),
        (costs.decode_weight_bytes + costs.decode_kv_bytes(a.n_gen) / std::max(a.n_gen, 1)) / 1e6,
        probe.isa.c_str(), probe.fma_f32_for(a.threads), probe.bf16_for(a.threads), amx,
        probe.int8_for(a.threads), a.threads, profile::probe_cache_path().c_str());
}

// The per-op tables (--profile) and the Chrome trace (--trace), to stderr under --json.
void print_profiles(const BenchArgs& a, const std::vector<profile::OpReport>& reports) {
    for (const profile::OpReport& rep : reports) {
        std::FILE* f = a.json ? stderr : stdout;
        std::fprintf(f, "\nprofile of %s (%d repetitions, %.1f ms of wall time)\n",
                     rep.phase.c_str(), a.reps, rep.wall_seconds * 1e3);
        std::fprintf(f, "%s", profile::format_op_report(rep).c_str());
        std::fprintf(f, "%s\n", rep.bottleneck.c_str());
    }
    if (!a.trace.empty()) {
        profiler::write_chrome_trace(a.trace);
        std::fprintf(a.json ? stderr : stdout,
                     "\ntrace: %zu events written to %s (open in https://ui.perfetto.dev or "
                     "chrome://tracing)\n",
                     profiler::trace_event_count(), a.trace.c_str());
    }
}

// One test's options; when profiling, the profiler runs during the timed repetitions only, and
// the trace keeps the first (enough to see, small to load).
profile::BenchOptions bench_options(const BenchArgs& a, bool profiling) {
    profile::BenchOptions opt;
    opt.threads = a.threads;
    opt.reps = a.reps;
    opt.n_batch = a.n_batch;
    opt.kv_types = a.cache_type.types();
    if (profiling) {
        opt.before_rep = [trace = !a.trace.empty()](int rep) {
            profiler::set_trace(trace && rep == 0);
            profiler::set_enabled(true);
        };
        opt.after_rep = [](int) { profiler::set_enabled(false); };
    }
    return opt;
}

// A row of llama-bench's table, with the share of the roofline.
void print_row(const BenchArgs& a, const profile::ModelCosts& costs, const std::string& model_type,
               const profile::BenchTest& test, const profile::BenchResult& r, double roof_ts) {
    char ts[64];
    std::snprintf(ts, sizeof ts, "%.2f ± %.2f", r.avg_ts, r.stddev_ts);
    std::printf("| %-28s | %10s | %7s | %7s | %7d | %8s | %17s | %6.0f%% |\n", model_type.c_str(),
                size_label(costs.model_bytes).c_str(), params_label(costs.n_params).c_str(), "CPU",
                a.threads, test.name().c_str(), ts, 100 * r.avg_ts / roof_ts);
    std::fflush(stdout);
}

int run_bench_cmd(const BenchArgs& a) {
    SYSLM_CHECK(a.n_prompt > 0 || a.n_gen > 0, "bench: nothing to measure (-p 0 and -n 0)");
    bool measured = false;
    const profile::ProbeResult probe = profile::cached_or_measured_probe(0, false, &measured);
    if (measured)
        std::fprintf(stderr, "bench: measured this machine's limits (cached in %s)\n",
                     profile::probe_cache_path().c_str());

    const model::Model m(a.model);
    const profile::ModelCosts costs = profile::model_costs(m, a.cache_type.types());
    const uint32_t ftype = m.file().get_u32("general.file_type", 0);
    const std::string model_type =
        m.hparams().arch_name + " " + params_label(costs.n_params) + " " + ftype_name(ftype);

    std::vector<profile::BenchTest> tests;
    if (a.n_prompt > 0) tests.push_back({a.n_prompt, 0, a.n_depth});
    if (a.n_gen > 0) tests.push_back({0, a.n_gen, a.n_depth});

    const bool profiling = a.profile || !a.trace.empty();
    double bandwidth_now = 0;  // the last decode test's (for the note)
    nlohmann::json out = nlohmann::json::array();
    std::vector<profile::OpReport> reports;
    if (!a.json) print_table_header();
    for (const profile::BenchTest& test : tests) {
        if (profiling) profiler::reset();
        const profile::BenchOptions opt = bench_options(a, profiling);
        const std::string test_time = utc_now();
        const bool decode = test.n_gen > 0;
        // A shared machine's bandwidth drifts (by a sixth within an hour on the VMs this was
        // built on, and single passes ran from 25 to 45 GB/s), so decode's roof is the mean of
        // the bandwidth measured just before and just after the test, not the probe's figure
        // from another hour.
        const double gbs_before = decode ? read_bandwidth_now(a.threads) : 0;
        const profile::BenchResult r = profile::run_bench(m, test, opt);
        profile::ProbeResult roof_probe = probe;
        if (decode) {
            roof_probe.read_gbs = roof_probe.read_gbs_1 =
                0.5 * (gbs_before + read_bandwidth_now(a.threads));
            bandwidth_now = roof_probe.read_gbs;
        }
        const double roof_s = decode ? profile::decode_roofline_seconds(
                                           costs, test.n_gen, roof_probe, a.threads, a.n_depth)
                                     : profile::prefill_roofline_seconds(
                                           costs, test.n_prompt, probe, a.threads, a.n_depth);
        const double roof_ts = test.n_tokens() / roof_s;
        char basis[96];
        if (decode)
            std::snprintf(basis, sizeof basis,
                          "read bandwidth %.1f GB/s (measured around the test)",
                          roof_probe.read_gbs);
        else
            std::snprintf(basis, sizeof basis, "matrix peaks of the weight types");
        if (profiling) {
            double wall = 0;
            for (double ns : r.samples_ns) wall += ns * 1e-9;
            reports.push_back(
                profile::make_op_report((decode ? "decode " : "prefill ") + test.name(),
                                        profiler::collect(), wall, costs, roof_probe, a.threads));
        }

        out.push_back(bench_json(a, probe, costs, model_type, test, r, test_time, roof_ts, basis,
                                 roof_probe.read_gbs_for(a.threads)));
        if (!a.json) print_row(a, costs, model_type, test, r, roof_ts);
    }
    profiler::set_trace(false);

    if (a.json) {
        std::printf("%s\n", out.dump(2).c_str());
    } else {
        print_roofline_note(a, probe, costs, bandwidth_now);
        std::printf("%s", kernels::describe_decode_streams().c_str());
    }
    print_profiles(a, reports);
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<BenchArgs>();
    app.footer(
        "Method (as llama-bench): pp<p> processes one batch of p random tokens from an empty "
        "cache; tg<n> decodes n tokens one at a time from an empty cache; with -d D both start "
        "after D random tokens already cached (prefilled untimed). Each test runs once "
        "untimed, then -r times; t/s is the mean ± sample standard deviation over the "
        "repetitions. 'of roof' is the figure as a fraction of its roofline: decode against the "
        "read bandwidth (`syslm probe`'s read sum, measured again just before and after the test, "
        "their mean: a shared machine's bandwidth drifts) divided by the bytes a step "
        "reads (weights touched + KV cache), prefill against the arithmetic peak of the units each "
        "weight type's "
        "GEMM runs on, as measured at startup (AMX BF16 tiles, BF16 dot products or FP32 FMA; "
        "int8 dot products where no GEMM runs), attention against the FP32 FMA peak. The "
        "probe result is cached; run `syslm probe --refresh` on a quiet machine for good "
        "rooflines. --json prints one object per test with llama-bench's field names "
        "(n_prompt, n_gen, avg_ts, stddev_ts, model_size, model_n_params, n_threads, ...).");
    app.add_option("-m,--model", a->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    app.add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens for the pp test (0: skip)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_option("-n,--n-gen", a->n_gen, "Tokens to generate for the tg test (0: skip)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_option("-t,--threads", a->threads, "Threads")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    app.add_option("-r,--repetitions", a->reps, "Timed repetitions per test")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000));
    app.add_option("-b,--batch-size", a->n_batch, "Prompt tokens per forward call")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("-d,--n-depth", a->n_depth,
                   "Positions already in the KV cache when each test starts (llama-bench -d)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 22));
    add_cache_type_options(app, a->cache_type);
    app.add_flag("--json", a->json,
                 "Print a JSON array, one object per test (llama-bench -o json)");
    app.add_flag("--profile", a->profile,
                 "Profile the timed repetitions: per-op table and the bottleneck in one sentence");
    app.add_option("--trace", a->trace,
                   "Write a Chrome trace-event JSON file of the first timed repetition of each "
                   "test (implies profiling)");
    return [a] { return run_bench_cmd(*a); };
}

}  // namespace

SYSLM_COMMAND(bench, "bench",
              "Prompt-processing and generation speed (llama-bench method) against the roofline",
              setup);

}  // namespace syslm::cli
