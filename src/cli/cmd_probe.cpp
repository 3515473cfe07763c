// syslm probe: this machine's limits (memory bandwidth, arithmetic peaks, caches, ISA), measured
// with the engine's own kernels and cached for `syslm bench`.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/command.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/decode_streams.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/linear_backward.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/kernel_choices.hpp"
#include "kernels/repack.hpp"
#include "profile/machine_probe.hpp"

namespace syslm::cli {
namespace {

struct ProbeArgs {
    int threads = 0;
    bool json = false;
    bool refresh = false;
};

void print_peak(const char* what, double one, double all, int threads, const std::string& insn,
                const char* unit) {
    if (one <= 0) {
        std::printf("  %-22s not available with this ISA\n", what);
        return;
    }
    std::printf("  %-22s %8.1f %s/core  %8.1f %s (%d threads)   [%s]\n", what, one, unit, all, unit,
                threads, insn.c_str());
}

// How a remembered kernel choice came about: timed by this process, or read from the store.
std::string origin(const kernels::KernelChoice& k) {
    if (k.value.empty()) return "";
    return " [" + k.timings + (k.remembered ? "; remembered]" : "; timed now]");
}

// The kernels chosen by timing (kernels/kernel_choices.hpp): timed once per machine, remembered.
void print_kernel_choices() {
    const std::string dir = kernels::kernel_choices_dir();
    std::printf("kernel choices (timed once per machine; %s)\n",
                dir.empty() ? "SYSLM_KERNEL_CACHE=off: timed in every process"
                            : ("remembered in " + dir).c_str());
    const kernels::PanelChoice& pc = kernels::gemm_panel_choice(kernels::active_isa());
    std::printf("  %-26s %s%s\n", "prefill GEMM panels", kernels::gemm_panel_name(pc.panel),
                pc.record.value.empty() ? " (the only one, or SYSLM_GEMM_PANEL)"
                                        : origin(pc.record).c_str());
    for (DType file_type : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        const kernels::KernelChoice& lc = kernels::lane_order_choice(file_type);
        const std::string what = "decode order, " + std::string(dtype_name(file_type));
        std::printf("  %-26s %s%s\n", what.c_str(), lc.value.empty() ? "file" : lc.value.c_str(),
                    lc.value.empty() ? " (the only one on this ISA)" : origin(lc).c_str());
    }
    for (DType file_type : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
        const DType t = kernels::load_layout(file_type, 2048);  // what the weights run as
        const kernels::GemmCrossover& c = kernels::gemm_crossover(t);
        const std::string what = "GEMM from, " + std::string(dtype_name(t));
        const std::string from = c.record.value == "never"
                                     ? std::string("never (the int8 dots at every size)")
                                     : std::to_string(c.min_tokens) + " tokens";
        std::printf("  %-26s %s%s\n", what.c_str(), from.c_str(),
                    c.record.value.empty() ? " (not timed)" : origin(c.record).c_str());
    }
    for (DType t : {DType::Q8_0_G8W, DType::Q4_0_G8}) {
        const kernels::BatchDotChoice& b = kernels::batch_dot_choice(t);
        const std::string what = "batched dots, " + std::string(dtype_name(t));
        std::printf("  %-26s %s%s\n", what.c_str(), b.amx ? "amx-int8" : "vnni",
                    !b.record.value.empty()          ? origin(b.record).c_str()
                    : std::getenv("SYSLM_BATCH_DOT") ? " (SYSLM_BATCH_DOT)"
                                                     : " (no AMX int8 tiles)");
    }
    const kernels::AttentionChoice& ac = kernels::attention_prefill_choice();
    std::printf("  %-26s %s%s\n", "prefill attention", ac.amx ? "amx-bf16" : "f32",
                !ac.record.value.empty()         ? origin(ac.record).c_str()
                : std::getenv("SYSLM_ATTENTION") ? " (SYSLM_ATTENTION)"
                                                 : " (no AMX tiles)");
    const kernels::TrainGemmChoice& tc = kernels::train_gemm_choice();
    std::string how;
    for (const kernels::KernelChoice& k : tc.records) how += origin(k);
    std::printf("  %-26s f32 on %s, bf16 on %s%s\n", "training GEMMs",
                kernels::train_gemm_name(tc.f32),
                tc.bf16 == kernels::TrainGemm::None ? "f32 (rounded copies)"
                                                    : kernels::train_gemm_name(tc.bf16),
                how.c_str());
}

int run_probe_cmd(const ProbeArgs& a) {
    if (a.refresh) kernels::forget_kernel_choices();  // timed again as they are printed
    bool measured = false;
    if (!a.json) std::fprintf(stderr, "probe: %s\n", a.refresh ? "measuring..." : "loading...");
    const profile::ProbeResult r =
        profile::cached_or_measured_probe(a.threads, a.refresh, &measured);
    if (a.json) {
        nlohmann::json j = profile::to_json(r);
        j["cache_file"] = profile::probe_cache_path();
        j["from_cache"] = !measured;
        std::printf("%s\n", j.dump(2).c_str());
        return 0;
    }
    std::printf("CPU         %s, %d hardware threads\n", r.cpu.c_str(), r.hw_threads);
    std::printf("ISA         %s kernels; CPU features: %s\n", r.isa.c_str(), r.features.c_str());
    std::printf("caches      %s\n", r.caches.empty() ? "(not described by sysfs)"
                                                     : profile::describe(r.caches).c_str());
    std::printf("memory\n");
    std::printf("  %-22s %8.1f GB/s (1 thread)  %8.1f GB/s (%d threads)\n", "read (sum)",
                r.read_gbs_1, r.read_gbs, r.threads);
    std::printf("  %-22s %8s                    %8.1f GB/s (%d threads)\n", "read, 4 KiB pages", "",
                r.read_gbs_small_pages, r.threads);
    std::printf("  %-22s %8.1f GB/s (1 thread)  %8.1f GB/s (%d threads)\n", "copy (read+write)",
                r.copy_gbs_1, r.copy_gbs, r.threads);
    std::printf("compute peaks\n");
    print_peak("FP32 FMA", r.fma_f32_1, r.fma_f32, r.threads, r.fma_f32_insn, "GFLOP/s");
    print_peak("BF16 dot", r.bf16_1, r.bf16, r.threads, r.bf16_insn, "GFLOP/s");
    print_peak("int8 dot (u8 x s8)", r.int8_1, r.int8, r.threads, r.int8_insn, "GOP/s ");
    print_peak("AMX BF16 tiles", r.amx_bf16_1, r.amx_bf16, r.threads, "tdpbf16ps", "GFLOP/s");
    print_peak("AMX int8 tiles", r.amx_int8_1, r.amx_int8, r.threads, "tdpbssd", "GOP/s ");
    print_kernel_choices();
    // Decode's weight streams are timed on the real weights, in each process (`bench` prints them).
    if (std::getenv("SYSLM_DECODE_STREAMS"))
        std::printf("%s", kernels::describe_decode_streams().c_str());
    else
        std::printf("decode weights read as one or two row streams per thread: timed on each "
                    "process's first decode calls, per weight type (`syslm bench` prints them)\n");
    std::printf("%s %s (%s; pass --refresh to measure it and the kernel choices again)\n",
                measured ? "measured now, cached in" : "cached result from",
                profile::probe_cache_path().c_str(), r.measured_at.c_str());
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<ProbeArgs>();
    app.footer(
        "Read bandwidth: a 512 MiB buffer summed with SIMD by every thread (best of 8 passes), "
        "backed by transparent huge pages where the kernel allows, and again with 4 KiB pages "
        "(as weights mmap'd from a file are). "
        "Copy bandwidth: 256 MiB copied with ordinary stores, counted as bytes read + written "
        "(as STREAM's Copy). Peaks: register-only loops of the FMA, BF16 (vdpbf16ps, AVX-512 BF16 "
        "CPUs only) and u8 x s8 dot-product instructions of the active ISA (SYSLM_ISA caps it); a "
        "multiply-add counts 2 operations. Results are cached per CPU, thread count and ISA.");
    app.add_option("-t,--threads", a->threads, "Threads for the all-core figures (default: all)")
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--json", a->json, "Print the result as one JSON object");
    app.add_flag("--refresh", a->refresh,
                 "Measure again even if a cached result exists, and time the kernel choices again");
    return [a] { return run_probe_cmd(*a); };
}

}  // namespace

SYSLM_COMMAND(probe, "probe",
              "Measure this machine's limits: memory bandwidth, FP32/BF16/int8 peaks, caches, ISA",
              setup);

}  // namespace syslm::cli
