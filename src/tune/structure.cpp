#include "tune/structure.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <ostream>

#include "compress/prune.hpp"
#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/subprocess.hpp"
#include "data/prepare.hpp"
#include "io/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::tune {
namespace fs = std::filesystem;
namespace {

constexpr int kRecoverBatch = 8;  // sequences per recovery step

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

// The calibration text as token shards for the recovery run (val split: none), made once.
std::string calibration_data(const StructureOptions& o) {
    const fs::path dir = fs::path(o.work_dir) / "calib-data";
    if (fs::exists(dir / "meta.json")) return dir.string();
    const io::GGUFFile f(o.model);
    const auto tok = tokenizer::Tokenizer::from_gguf(f);
    data::PrepareOptions po;
    po.inputs = {o.calib};
    po.tokenizer_path = o.model;
    po.out_dir = dir.string();
    po.val_fraction = 0;
    data::prepare_data(po, tok);
    return dir.string();
}

}  // namespace

std::vector<PruneSettings> default_prune_levels(const model::HParams& hp, int recover_steps,
                                                int max_levels) {
    std::vector<PruneSettings> levels;
    if (hp.n_ff <= 0 || hp.n_expert > 0) return levels;  // dense FFNs only
    const int step = hp.n_ff / 2 >= 256 ? 256 : 64;
    for (int keep = (static_cast<int>(0.9 * hp.n_ff) / step) * step;
         keep >= (hp.n_ff + 1) / 2 && keep > 0 && static_cast<int>(levels.size()) < max_levels;
         keep -= step) {
        PruneSettings s;
        s.ffn = 1.0 - static_cast<double>(keep) / hp.n_ff;
        s.recover_steps = recover_steps;
        levels.push_back(s);
    }
    return levels;
}

PruneSettings parse_prune_level(const std::string& spec, int recover_steps) {
    compress::PruneOptions o;
    compress::parse_structured_spec(spec, o, "--prune");
    SYSLM_CHECK(o.ffn + o.heads > 0 || o.layers > 0, "--prune: '", spec, "' removes nothing");
    PruneSettings s;
    s.ffn = o.ffn;
    s.heads = o.heads;
    s.layers = o.layers;
    s.recover_steps = recover_steps;
    return s;
}

int recovery_seq(const model::HParams& hp, int n_ctx) {
    return std::max(8, std::min({128, n_ctx, hp.n_ctx_train > 0 ? hp.n_ctx_train : 128}));
}

int default_recover_steps(const model::HParams& hp, int n_ctx, size_t calib_tokens) {
    const double per_step = static_cast<double>(kRecoverBatch) * (recovery_seq(hp, n_ctx) + 1);
    return std::clamp(static_cast<int>(4.0 * static_cast<double>(calib_tokens) / per_step), 50, 400);
}

double predicted_recovery_s(const model::HParams& hp, double forward_flops_per_token,
                            const PruneSettings& level, int n_ctx, double fp32_gflops) {
    const double tokens =
        static_cast<double>(level.recover_steps) * kRecoverBatch * recovery_seq(hp, n_ctx);
    // Student forward + backward (3x) and the teacher's forward (1x).
    return 4 * forward_flops_per_token * tokens / (0.25 * fp32_gflops * 1e9);
}

PrunedBase pruned_base(const PruneSettings& level, const StructureOptions& o) {
    PrunedBase b;
    b.level = level;
    const std::string key = number(level.ffn) + "," + number(level.heads) + "," +
                            std::to_string(level.layers) + "," +
                            std::to_string(level.recover_steps) + "," + number(level.recover_lr);
    const std::string name = "base-" + word_hash_name(key);
    const fs::path path = fs::path(o.work_dir) / (name + ".gguf");
    if (!fs::exists(path)) {
        const auto t0 = std::chrono::steady_clock::now();
        fs::create_directories(o.work_dir);
        const fs::path pruned = fs::path(o.work_dir) / (name + "-pruned.gguf");
        compress::PruneOptions po;
        po.ffn = level.ffn;
        po.heads = level.heads;
        po.layers = level.layers;
        po.imatrix = o.imatrix;
        po.calib_tokens = o.calib_tokens;
        po.calib_bos = o.calib_bos;
        po.calib_ctx = o.n_ctx;
        po.threads = o.threads;
        compress::prune_structured(o.model, pruned.string(), po);
        const model::HParams hp = model::load_hparams(io::GGUFFile(pruned.string()));
        if (level.recover_steps == 0) {
            fs::rename(pruned, path);
        } else {
            // Distillation from the input on the calibration text: the loss is the KL to it
            // alone (alpha 1), what the tuner's quality limit measures.
            const std::string log = (fs::path(o.work_dir) / (name + "-recovery.log")).string();
            if (o.log)
                *o.log << "tune: structure: pruned to FFN " << hp.n_ff << ", " << hp.n_head
                       << " heads, " << hp.n_layer << " layers; recovering for "
                       << level.recover_steps << " steps (progress in " << log << ")"
                       << std::endl;
            std::vector<std::string> argv{
                self_executable(), "train", "--init", pruned.string(), "--teacher", o.model,
                "--distill-alpha", "1", "--data", calibration_data(o), "--batch",
                std::to_string(kRecoverBatch), "--seq", std::to_string(recovery_seq(hp, o.n_ctx)),
                "--steps", std::to_string(level.recover_steps), "--lr", number(level.recover_lr),
                "--min-lr", number(level.recover_lr / 10), "--warmup",
                std::to_string(std::min(10, level.recover_steps / 10)), "--log-every",
                std::to_string(level.recover_steps), "-o", path.string()};
            if (o.threads > 0) argv.insert(argv.end(), {"-t", std::to_string(o.threads)});
            const ProcessResult r = run_process(argv, log);
            SYSLM_CHECK(r.status == 0 && fs::exists(path), "tune: the recovery run of ", key,
                        " failed (exit ", r.status, "); its output is in ", log);
            fs::remove(pruned);
        }
        b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    const model::HParams hp = model::load_hparams(io::GGUFFile(path.string()));
    b.path = path.string();
    b.level.n_layer = hp.n_layer;
    b.level.n_head = hp.n_head;
    b.level.n_ff = hp.n_ff;
    return b;
}

}  // namespace syslm::tune
