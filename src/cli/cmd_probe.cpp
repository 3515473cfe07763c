// syslm probe: this machine's limits (memory bandwidth, arithmetic peaks, caches, ISA), measured
// with the engine's own kernels and cached for `syslm bench`.
#include <cstdio>
#include <cstdlib>

#include "cli/command.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/decode_streams.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/linear_backward.hpp"
#include "kernels/cpu/matmul.hpp"
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

int run_probe_cmd(const ProbeArgs& a) {
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
    // Measured in this process, not cached: which prefill panels quantized weights use.
    const kernels::PanelChoice& pc = kernels::gemm_panel_choice(kernels::active_isa());
    std::printf("prefill GEMM panels for quantized weights (timed now, 1 thread):");
    if (pc.timings.empty()) std::printf(" %s (the only one, or SYSLM_GEMM_PANEL)", kernels::gemm_panel_name(pc.panel));
    for (const auto& t : pc.timings)
        std::printf(" %s %.0f GFLOP/s%s", kernels::gemm_panel_name(t.panel), t.gflops,
                    t.panel == pc.panel ? " (chosen)" : "");
    std::printf("\n");
    // Also measured now: from how many tokens a batch of quantized rows goes through the GEMM.
    std::printf("GEMM instead of vec_dot from (timed now, 1 thread, 2048 x 256 matrix):");
    for (DType file_type : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
        const DType t = kernels::load_layout(file_type, 2048);  // what the weights run as
        const kernels::GemmCrossover& c = kernels::gemm_crossover(t);
        std::printf(" %s %lld%s", dtype_name(t).data(), static_cast<long long>(c.min_tokens),
                    c.timings.empty() ? " (not timed)"
                    : c.timings.back().gemm_s * kernels::kGemmCrossoverMargin >=
                              c.timings.back().vec_dot_s
                        ? " (the GEMM was not 10% faster there either)"
                        : "");
    }
    std::printf("\n");
    // Batches below that (serving's decode steps): the VNNI dots or the AMX int8 tiles.
    std::printf("batched dots (timed now, 1 thread, 16 tokens x 256 x 2048):");
    for (DType t : {DType::Q8_0_G8W, DType::Q4_0_G8}) {
        const kernels::BatchDotChoice& b = kernels::batch_dot_choice(t);
        if (b.vnni_ms > 0)
            std::printf(" %s vnni %.2f ms, amx-int8 %.2f ms (%s);", dtype_name(t).data(),
                        b.vnni_ms, b.amx_ms, b.amx ? "amx-int8" : "vnni");
        else
            std::printf(" %s %s (%s);", dtype_name(t).data(), b.amx ? "amx-int8" : "vnni",
                        std::getenv("SYSLM_BATCH_DOT") ? "SYSLM_BATCH_DOT" : "no AMX int8 tiles");
    }
    std::printf("\n");
    // Prefill attention of quantized / F16 / BF16 models: f32 or the AMX tiles.
    const kernels::AttentionChoice& ac = kernels::attention_prefill_choice();
    if (ac.f32_ms > 0)
        std::printf("prefill attention (timed now, 1 thread, 256 tokens): f32 %.2f ms, amx-bf16 "
                    "%.2f ms; %s\n", ac.f32_ms, ac.amx_ms, ac.amx ? "amx-bf16" : "f32");
    else
        std::printf("prefill attention: %s (%s)\n", ac.amx ? "amx-bf16" : "f32",
                    std::getenv("SYSLM_ATTENTION") ? "SYSLM_ATTENTION" : "no AMX tiles");
    // And the GEMMs of training's linear layers, per precision.
    const kernels::TrainGemmChoice& tc = kernels::train_gemm_choice();
    std::printf("training GEMMs (timed now, 1 thread, 128 x 512 x 384 layer, 3 GEMMs):");
    for (const auto& t : tc.timings)
        std::printf(" %s %.0f GFLOP/s", kernels::train_gemm_name(t.gemm), t.gflops);
    std::printf("; f32 on %s, bf16 on %s\n", kernels::train_gemm_name(tc.f32),
                tc.bf16 == kernels::TrainGemm::None ? "f32 (rounded copies)"
                                                    : kernels::train_gemm_name(tc.bf16));
    // Decode's weight streams are timed on the real weights, in each process (`bench` prints them).
    if (std::getenv("SYSLM_DECODE_STREAMS"))
        std::printf("%s", kernels::describe_decode_streams().c_str());
    else
        std::printf("decode weights read as one or two row streams per thread: timed on each "
                    "process's first decode calls, per weight type (`syslm bench` prints them)\n");
    std::printf("%s %s (%s; delete the file or pass --refresh to measure again)\n",
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
    app.add_flag("--refresh", a->refresh, "Measure again even if a cached result exists");
    return [a] { return run_probe_cmd(*a); };
}

}  // namespace

SYSLM_COMMAND(probe, "probe",
              "Measure this machine's limits: memory bandwidth, FP32/BF16/int8 peaks, caches, ISA",
              setup);

}  // namespace syslm::cli
