#include "cli/tune_edge.hpp"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "serve/cloud_link.hpp"
#include "tune/edge_profile.hpp"

namespace syslm::cli {

namespace {

struct EdgeArgs {
    tune::EdgeTuneOptions o;
    std::string device, link = "0,0ms";
};

int run(EdgeArgs& a) {
    try {
        a.o.device = tune::parse_device(a.device);
        const serve::LinkProfile link = serve::parse_link(a.link);
        a.o.link_rtt_s = link.rtt_s;
        a.o.link_bits_per_s = link.bits_per_s;
    } catch (const Error& e) {
        throw UsageError(e.what());
    }
    a.o.log = &std::cerr;
    const tune::EdgeTuneResult r = tune::tune_edge(a.o);
    const std::filesystem::path dir(a.o.out_dir);
    write_file_atomically((dir / "edge.json").string(), tune::edge_report_json(r, a.o));
    std::printf("%s", tune::edge_report_table(r, a.o).c_str());
    std::printf("wrote %s/{edge.json%s} in %.0f s\n", a.o.out_dir.c_str(),
                r.chosen ? ",plan.json,model.gguf" : "", r.seconds);
    return r.chosen ? 0 : 1;
}

}  // namespace

std::function<int()> setup_tune_edge(CLI::App& sub) {
    auto a = std::make_shared<EdgeArgs>();
    tune::EdgeTuneOptions& o = a->o;
    sub.add_option("-m,--model", o.model, "The model the cloud serves (GGUF)")
        ->required()
        ->check(CLI::ExistingFile);
    sub.add_option("--eval", o.eval, "Held-out text: the split model's KL is measured here")
        ->required()
        ->check(CLI::ExistingFile);
    sub.add_option("-o,--out", o.out_dir, "Directory for the report, plan.json and model.gguf")
        ->required();
    sub.add_option("--device", a->device,
                   "The edge: its memory and cores, e.g. 2GB,2cores (units B, KB, MB, GB, KiB, MiB, GiB)")
        ->required();
    sub.add_option("--link", a->link, "The link to the cloud, RATE,RTT (e.g. 20mbit,30ms)")
        ->capture_default_str();
    sub.add_option("--max-kl", o.max_kl,
                   "Quality limit: mean KL(input || split model) on --eval, nats per token")
        ->capture_default_str()
        ->check(finite_in(0, 10, true));
    sub.add_option("--max-edge-ms", o.max_edge_ms,
                   "The edge's own time per token for its layers, at most (0: no limit)")
        ->capture_default_str()
        ->check(finite_in(0, 1e6, true));
    sub.add_option("--types", o.types, "Weight types of the edge's copy to try (stock recipes)")
        ->delimiter(',')
        ->capture_default_str();
    sub.add_option("--wires", o.wires, "Wire formats to try (f16, int8, f32)")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::IsMember({"f16", "int8", "f32"}));
    sub.add_option("-c,--ctx-size", o.n_ctx, "Positions the edge serves (its KV cache)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    sub.add_option("--eval-ctx", o.eval_ctx, "Tokens per chunk of the KL measurement")
        ->capture_default_str()
        ->check(CLI::Range(8, 1 << 20));
    sub.add_option("--eval-chunks", o.eval_chunks, "Chunks of --eval measured")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    sub.add_option("-t,--threads", o.threads, "Threads of the quantizer and the KL measurement")
        ->check(CLI::Range(0, 4096));
    return [a] { return run(*a); };
}

}  // namespace syslm::cli
