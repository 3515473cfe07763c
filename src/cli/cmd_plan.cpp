// syslm plan: the best data x tensor x pipeline layout, ZeRO stage and recompute policy for a
// model on a described cluster, from parallel/planner's cost model; and `--calibrate`, which measures
// the rates that model needs on the user's own hardware (compute rate of a training step, overlap
// of the data-parallel reduction, all-reduce bandwidth and latency under mpirun).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "backend/cpu_backend.hpp"
#include "cli/command.hpp"
#include "cli/config_file.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/mapped_file.hpp"
#include "io/gguf.hpp"
#include "model/hparams.hpp"
#include "parallel/communicator.hpp"
#include "parallel/planner.hpp"
#include "profile/machine_probe.hpp"
#include "train/trainer.hpp"

namespace syslm::cli {
namespace {

struct PlanArgs {
    std::string model, cluster, calibration, calibrate, layout, precision = "bf16";
    int64_t layers = 0, dim = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
    int64_t experts = 0, experts_used = 0, ffn_expert = 0;
    bool tied = false;
    int64_t seq = 2048, batch = 512, micro_batch = 1;
    int top = 10, threads = 1, steps = 6;
    bool json = false;
};

parallel::ModelShape shape_of(const PlanArgs& a) {
    parallel::ModelShape m;
    if (!a.model.empty() && a.model.size() > 5 && a.model.substr(a.model.size() - 5) == ".gguf") {
        const io::GGUFFile f(a.model);
        const model::HParams hp = model::load_hparams(f);
        m.layers = hp.n_layer;
        m.dim = hp.n_embd;
        m.heads = hp.n_head;
        m.kv_heads = hp.n_head_kv;
        m.ffn = hp.n_ff;
        m.vocab = f.tensor("token_embd.weight").ne[1];
        m.experts = hp.n_expert;
        m.experts_used = hp.n_expert_used;
        m.ffn_expert = hp.n_ff_exp;
        m.tied = f.find_tensor("output.weight") == nullptr;
    } else {
        m.layers = a.layers;
        m.dim = a.dim;
        m.heads = a.heads;
        m.kv_heads = a.kv_heads > 0 ? a.kv_heads : a.heads;
        m.ffn = a.ffn;
        m.vocab = a.vocab;
        m.experts = a.experts;
        m.experts_used = a.experts_used;
        m.ffn_expert = a.ffn_expert;
        m.tied = a.tied;
    }
    SYSLM_CHECK(m.layers > 0 && m.dim > 0 && m.heads > 0 && m.vocab > 0 &&
                    (m.ffn > 0 || (m.experts > 0 && m.ffn_expert > 0)),
                "plan: the model needs layers, dim, heads, ffn and vocab (flags, --model "
                "file.toml with those keys, or --model model.gguf)");
    SYSLM_CHECK(m.dim % m.heads == 0, "plan: dim ", m.dim, " is not a multiple of heads ", m.heads);
    return m;
}

// Applies a calibration file: the device's rates and the reduction's overlap.
void apply_calibration(parallel::Cluster& c, const std::string& path) {
    std::ifstream in(path);
    SYSLM_CHECK(in, path, ": cannot open the calibration");
    nlohmann::json j;
    try {
        in >> j;
        c.device.peak = j.at("peak_flops").get<double>();
        c.device.efficiency = j.at("train_flops").get<double>() / c.device.peak;
        if (j.contains("bus_bw") && j["bus_bw"].get<double>() > 0) {
            c.device.intra_bw = j["bus_bw"].get<double>();
            c.device.intra_latency = j["step_latency"].get<double>();
        }
        if (j.contains("overlap")) c.overlap = j["overlap"].get<double>();
        if (c.device.memory <= 0 && j.contains("memory")) c.device.memory = j["memory"].get<double>();
    } catch (const nlohmann::json::exception& e) {
        fail(path, ": not a syslm plan calibration (", e.what(), ")");
    }
}

parallel::Layout parse_layout(const std::string& text) {
    parallel::Layout l;
    size_t at = 0;
    while (at < text.size()) {
        const size_t comma = std::min(text.find(',', at), text.size());
        const std::string item = text.substr(at, comma - at);
        const size_t eq = item.find('=');
        SYSLM_CHECK(eq != std::string::npos, "plan: layout item '", item, "' is not key=value");
        const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
        if (k == "recompute") {
            l.recompute = parallel::recompute_policy(v);
        } else {
            int n = 0;
            try {
                n = std::stoi(v);
            } catch (...) {
                fail("plan: layout value '", v, "' of ", k, " is not a number");
            }
            if (k == "dp") l.dp = n;
            else if (k == "tp") l.tp = n;
            else if (k == "pp") l.pp = n;
            else if (k == "zero") l.zero = n;
            else fail("plan: unknown layout key '", k, "' (dp, tp, pp, zero, recompute)");
        }
        at = comma + 1;
    }
    return l;
}

nlohmann::json to_json(const parallel::Estimate& e) {
    return {{"dp", e.layout.dp}, {"tp", e.layout.tp}, {"pp", e.layout.pp}, {"zero", e.layout.zero},
            {"recompute", parallel::recompute_name(e.layout.recompute)},
            {"micro_batches", e.micro_batches}, {"step_s", e.step_s}, {"compute_s", e.compute_s},
            {"bubble_s", e.bubble_s}, {"tp_s", e.tp_s}, {"pp_s", e.pp_s}, {"dp_s", e.dp_s},
            {"dp_bytes", e.dp_bytes}, {"tp_bytes", e.tp_bytes}, {"pp_bytes", e.pp_bytes},
            {"memory_bytes", e.memory()}, {"optimizer_bytes", e.mem_optimizer},
            {"fits", e.fits}, {"mfu", e.mfu}};
}

// --calibrate: a few training steps of the proxy model alone (compute rate), then as data
// parallel over the MPI world (overlap), then an all-reduce sweep (bandwidth, latency).
int calibrate(const PlanArgs& a) {
    SYSLM_CHECK(!a.model.empty(), "plan --calibrate: give a proxy model to train (-m model.gguf)");
    const std::unique_ptr<parallel::Communicator> world = parallel::world();
    const io::GGUFFile file(a.model);
    backend::CpuBackend be(a.threads);
    const int B = static_cast<int>(a.micro_batch), T = static_cast<int>(a.seq);
    auto run = [&](parallel::Communicator* dp) {
        train::TrainModel m(file);
        train::SyntheticBatches data(7 + static_cast<uint64_t>(world->rank()), m.hparams().n_vocab, B, T);
        train::TrainOptions opt;
        opt.B = B;
        opt.T = T;
        opt.steps = a.steps;
        opt.data_parallel = dp;
        train::Trainer t(m, data, opt, be);
        t.step();  // warm-up
        const auto t0 = std::chrono::steady_clock::now();
        while (!t.done()) t.step();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                         static_cast<double>(a.steps - 1);
        const model::HParams& hp = m.hparams();
        parallel::ModelShape shape{hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.n_ff,
                               hp.n_vocab, hp.n_expert, hp.n_expert_used, hp.n_ff_exp,
                               file.find_tensor("output.weight") == nullptr};
        const double flops = parallel::flops_per_token(shape, T, parallel::Recompute::None) * B * T;
        return std::pair{flops / s, t.overlap()};
    };
    SYSLM_CHECK(a.steps >= 2, "plan --calibrate: --steps must be at least 2");
    const auto [rate, unused] = run(nullptr);  // every rank at once, as data parallel runs
    double train_flops = rate;
    world->all_reduce_sum(&train_flops, 1);
    train_flops /= world->size();
    nlohmann::json j;
    const profile::ProbeResult probe = profile::cached_or_measured_probe(0, false);
    j["device"] = "cpu";
    j["threads"] = a.threads;
    j["ranks"] = world->size();
    j["peak_flops"] = probe.fma_f32_for(a.threads) * 1e9;
    j["train_flops"] = train_flops;
    j["memory"] = static_cast<double>(meminfo_bytes("MemTotal")) / world->size();
    if (world->size() > 1) {
        j["overlap"] = run(world.get()).second;
        // All-reduce sweep: t = steps x latency + wire bytes / bandwidth, least squares.
        const int p = world->size();
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        int n = 0;
        for (size_t floats = 1 << 10; floats <= (size_t{1} << 22); floats *= 4) {
            std::vector<float> buf(floats, 1.0f);
            world->all_reduce_sum(buf.data(), floats);  // warm-up
            const int reps = 5;
            world->barrier();
            const auto t0 = std::chrono::steady_clock::now();
            for (int r = 0; r < reps; ++r) world->all_reduce_sum(buf.data(), floats);
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
            world->all_reduce_sum(&s, 1);
            s /= p;
            const double wire = 2.0 * (p - 1) / p * floats * sizeof(float);
            sx += wire;
            sy += s;
            sxx += wire * wire;
            sxy += wire * s;
            ++n;
        }
        const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
        const double icept = (sy - slope * sx) / n;
        j["bus_bw"] = slope > 0 ? 1.0 / slope : 0.0;
        j["step_latency"] = std::max(0.0, icept) / (2.0 * (p - 1));
    }
    if (world->rank() == 0) {
        std::ofstream out(a.calibrate);
        SYSLM_CHECK(out, a.calibrate, ": cannot write the calibration");
        out << j.dump(2) << "\n";
        std::fprintf(stderr, "calibration of %d rank(s) x %d thread(s) written to %s\n",
                     world->size(), a.threads, a.calibrate.c_str());
        std::printf("%s\n", j.dump().c_str());
    }
    return 0;
}

int run_plan(const PlanArgs& a) {
    if (!a.calibrate.empty()) return calibrate(a);
    SYSLM_CHECK(!a.cluster.empty(), "plan: describe the cluster (--cluster \"64 nodes x 8 H200, "
                                    "400 Gb/s\")");
    const parallel::ModelShape m = shape_of(a);
    parallel::Cluster c = parallel::parse_cluster(a.cluster);
    if (!a.calibration.empty()) apply_calibration(c, a.calibration);
    parallel::Workload w;
    w.seq = a.seq;
    w.global_batch = a.batch;
    w.micro_batch = a.micro_batch;
    if (a.precision == "f32") {  // syslm's CPU training: f32 copies, no separate master
        w.param_bytes = 4;
        w.master_bytes = 0;
        w.activation_bytes = 4;
    }
    std::vector<parallel::Estimate> plans;
    if (!a.layout.empty()) {
        parallel::Estimate e = parallel::estimate(m, c, w, parse_layout(a.layout));
        SYSLM_CHECK(e.why_not.empty(), "plan: layout ", a.layout, " cannot run: ", e.why_not);
        plans.push_back(e);
    } else {
        plans = parallel::search(m, c, w);
        SYSLM_CHECK(!plans.empty(), "plan: no layout of ", c.devices(), " devices can run this model");
    }
    const size_t shown = std::min<size_t>(plans.size(), static_cast<size_t>(a.top));
    if (a.json) {
        nlohmann::json out = nlohmann::json::array();
        for (size_t i = 0; i < shown; ++i) out.push_back(to_json(plans[i]));
        std::printf("%s\n", out.dump().c_str());
        return 0;
    }
    std::printf("model: %.2f B parameters (%.2f B active), %lld layers x %lld; %d x %s (%.0f GiB); "
                "global batch %lld x %lld tokens\n",
                m.params() / 1e9, m.active_params() / 1e9, static_cast<long long>(m.layers),
                static_cast<long long>(m.dim), c.devices(), c.device.name.c_str(),
                c.device.memory / (1 << 30), static_cast<long long>(a.batch),
                static_cast<long long>(a.seq));
    std::printf("%-4s %-4s %-4s %-4s %-9s %9s %6s %9s %5s %9s %8s %8s %8s %10s\n", "dp", "tp",
                "pp", "zero", "recompute", "step s", "MFU", "mem GiB", "fits", "compute", "bubble",
                "tp s", "dp s", "dp GB/dev");
    for (size_t i = 0; i < shown; ++i) {
        const parallel::Estimate& e = plans[i];
        std::printf("%-4d %-4d %-4d %-4d %-9s %9.3f %5.1f%% %9.1f %5s %9.3f %8.3f %8.3f %8.3f %10.2f\n",
                    e.layout.dp, e.layout.tp, e.layout.pp, e.layout.zero,
                    parallel::recompute_name(e.layout.recompute), e.step_s, 100 * e.mfu,
                    e.memory() / (1 << 30), e.fits ? "yes" : "NO", e.compute_s, e.bubble_s, e.tp_s,
                    e.dp_s, e.dp_bytes / 1e9);
    }
    if (!plans.front().fits)
        std::printf("no layout fits in memory: the closest is shown first\n");
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<PlanArgs>();
    app.footer("The cost model and its assumptions: docs/design/distributed.md (Planning).");
    app.add_option("--model,-m", a->model,
                   "The model: a GGUF file, or a TOML file of the flags below (layers = 80, ...)");
    app.add_option("--cluster", a->cluster,
                   "\"<nodes> nodes x <per node> <device>[, <Gb/s per device between nodes>]\", "
                   "devices: H200, H100, A100, L40S, cpu (needs --calibration)");
    app.add_option("--calibration", a->calibration,
                   "Rates measured by `syslm plan --calibrate` (replace the device table's)")
        ->check(CLI::ExistingFile);
    app.add_option("--calibrate", a->calibrate,
                   "Measure this machine's rates into this JSON file (under mpirun for the "
                   "collectives): trains -m for --steps steps of --micro-batch x --seq tokens");
    app.add_option("--layout", a->layout, "Estimate one layout: dp=2,tp=1,pp=1,zero=1,recompute=none");
    app.add_option("--layers", a->layers, "Layers");
    app.add_option("--dim", a->dim, "Embedding width");
    app.add_option("--heads", a->heads, "Attention heads");
    app.add_option("--kv-heads", a->kv_heads, "KV heads (0: as heads)");
    app.add_option("--ffn", a->ffn, "FFN width");
    app.add_option("--vocab", a->vocab, "Vocabulary");
    app.add_option("--experts", a->experts, "Routed experts per layer (0: dense)");
    app.add_option("--experts-used", a->experts_used, "Experts per token");
    app.add_option("--ffn-expert", a->ffn_expert, "Width of one expert");
    app.add_flag("--tied", a->tied, "Output matrix tied to the embedding");
    app.add_option("--seq", a->seq, "Sequence length")->capture_default_str();
    app.add_option("--batch", a->batch, "Global batch in sequences per step")->capture_default_str();
    app.add_option("--micro-batch", a->micro_batch, "Sequences per micro-step of one replica")
        ->capture_default_str();
    app.add_option("--precision", a->precision, "bf16 (mixed, f32 master) or f32")
        ->capture_default_str()
        ->check(CLI::IsMember({"bf16", "f32"}));
    app.add_option("--top", a->top, "Layouts shown")->capture_default_str();
    app.add_option("-t,--threads", a->threads, "--calibrate: threads per rank")->capture_default_str();
    app.add_option("--steps", a->steps, "--calibrate: training steps timed (after one warm-up)")
        ->capture_default_str();
    app.add_flag("--json", a->json, "Print the layouts as JSON");
    return [a, &app] {
        // A TOML model file fills the shape flags (command-line flags win).
        if (a->model.size() > 5 && a->model.substr(a->model.size() - 5) == ".toml")
            apply_config_file(app, a->model);
        return run_plan(*a);
    };
}

}  // namespace

SYSLM_COMMAND(plan, "plan",
              "Best data / tensor / pipeline layout, ZeRO stage and recompute for a model on a "
              "cluster, from a calibrated cost model",
              setup);

}  // namespace syslm::cli
