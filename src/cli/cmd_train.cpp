// syslm train: train a model from scratch (--arch ...), fine-tune one (--init model.gguf) or
// continue a checkpoint (--resume dir), on a `syslm data prepare` directory (--data), a fixed
// batch of ids (--ids) or random tokens (--synthetic-data, for speed), with AdamW / Lion / SGD, a
// warm-up + cosine / linear / constant schedule, gradient accumulation and clipping. Prints a live
// progress line (step, loss, tokens/s, MFU against `syslm probe`'s peak of the arithmetic the
// matmuls run on, ETA), evaluates on the val split, stops early without improvement, writes
// checkpoints atomically (and on Ctrl-C), metrics as JSON lines, and the trained model as GGUF
// (-o). With --json the last line of stdout
// is {"tokens_per_s", "mfu", "first_loss", "final_loss", "peak_rss_mib"}.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "backend/cpu_backend.hpp"
#include "cli/command.hpp"
#include "cli/token_ids.hpp"
#include "cli/train_args.hpp"
#include "cli/train_strata.hpp"
#include "cli/vocab_file.hpp"
#include "compress/quantize_model.hpp"
#include "core/error.hpp"
#include "core/profiler.hpp"
#include "core/thread_pool.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/linear_backward.hpp"
#include "model/random_init.hpp"
#include "parallel/communicator.hpp"
#include "parallel/grad_compress.hpp"
#include "parallel/mesh.hpp"
#include "parallel/planner.hpp"
#include "profile/machine_probe.hpp"
#include "train/batch_plan.hpp"
#include "train/checkpoint_files.hpp"
#include "train/teacher.hpp"
#include "train/teacher_cache.hpp"
#include "train/trainer.hpp"

namespace syslm::cli::train_cmd {
namespace {

// FLOPs of one trained token (parallel::training_flops_per_token) from the model's own matrices:
// of a layer's experts only the k a token is routed to; the output head (tied or not) counts.
// With LoRA the frozen base's matrices (from `file`) count forward and input gradient only.
double flops_per_token(train::TrainModel& m, int T, const io::GGUFFile& file) {
    const auto& hp = m.hparams();
    double matrix = 0;
    bool tied = true;
    double frozen = 0;
    if (m.lora()) {
        for (const io::GGUFTensor& t : file.tensors())
            if (t.ne.size() == 2 && t.name != "token_embd.weight" &&
                t.name != "position_embd.weight" && !t.name.ends_with("attn_conv.weight"))
                frozen += static_cast<double>(t.numel());
        if (!file.find_tensor("output.weight"))
            frozen += static_cast<double>(hp.n_vocab) * hp.n_embd;
        tied = false;
    }
    for (const train::Param& p : m.params().params()) {
        if (p.auxiliary) continue;  // distillation's projections: not the model's work
        if (p.name == "output.weight") tied = false;
        double uses = 1;  // a shared block computes once for each layer that takes it
        if (hp.shares_blocks() && p.name.starts_with("blk.")) {
            const int b = std::stoi(p.name.substr(4));
            uses =
                static_cast<double>(std::count(hp.block_source.begin(), hp.block_source.end(), b));
        }
        if (p.ne.size() == 2 && p.name != "token_embd.weight" && p.name != "position_embd.weight")
            matrix += static_cast<double>(p.numel) * uses;
        if (p.ne.size() == 3)  // experts
            matrix += static_cast<double>(p.numel) * uses * hp.n_expert_used / hp.n_expert;
    }
    if (tied) matrix += static_cast<double>(hp.n_vocab) * hp.n_embd;
    // Keys a token attends, summed over the layers: local ones stop at their window.
    double attended = 0;
    for (int il = 0; il < hp.n_layer; ++il) attended += model::attention_pairs(hp, il, T) / T;
    // The MFU counts the model's work, not full recompute's second forward.
    return parallel::training_flops_per_token(matrix, 0, attended, hp.q_dim(),
                                              parallel::Recompute::None) +
           4.0 * frozen;
}

// Peak resident memory of this process image: /proc's VmHWM (getrusage's ru_maxrss would also
// count a parent's memory from before exec, e.g. a Python harness that forked us).
double peak_rss_mib() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

std::atomic<bool> g_interrupted{false};

void on_sigint(int) {
    g_interrupted = true;
}

std::string eta(double seconds) {
    const long s = static_cast<long>(seconds + 0.5);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
    return buf;
}

// The ranks of one run (parallel/mesh.hpp) and their communicators. Rank 0 prints, logs and
// writes files.
struct RankLayout {
    std::unique_ptr<parallel::Communicator> world;
    parallel::Mesh mesh;
    parallel::Mesh::Coord at;  // this rank's place
    parallel::MeshGroups groups;
    bool lead = true;
    FILE* info = stderr;  // progress: stderr on rank 0, /dev/null elsewhere (errors still print)

    parallel::Communicator& replicas() const { return groups.dp ? *groups.dp : *world; }
    std::vector<parallel::Communicator*> all() const {
        std::vector<parallel::Communicator*> out;
        for (parallel::Communicator* c :
             {world.get(), groups.tp.get(), groups.dp.get(), groups.pp.get()})
            if (c) out.push_back(c);
        return out;
    }
    uint64_t bytes_sent() const {
        uint64_t b = 0;
        for (parallel::Communicator* c : all()) b += c->bytes_sent();
        return b;
    }
};

RankLayout make_rank_layout(const TrainArgs& a) {
    RankLayout r;
    r.world = parallel::world(a.dp > 1 || a.tp > 1 || a.pp > 1);
    const int size = r.world->size();
    r.mesh = parallel::Mesh::of_world(size, std::max(1, a.tp), std::max(1, a.pp));
    SYSLM_CHECK(a.dp == 0 || a.dp == r.mesh.dp, "train: --dp ", a.dp, " x --tp ", r.mesh.tp,
                " x --pp ", r.mesh.pp, " but ", size, " ranks were started (run `mpirun -np ",
                (a.dp > 0 ? a.dp : 1) * r.mesh.tp * r.mesh.pp, " syslm train ...`)");
    SYSLM_CHECK(r.mesh.pp == 1 || a.eval_every == 0,
                "train: --eval-every with pipeline parallelism is not implemented yet");
    r.at = r.mesh.coord(r.world->rank());
    r.groups = parallel::split_mesh(*r.world, r.mesh);
    r.lead = r.world->rank() == 0;
    if (size > 1)
        for (parallel::Communicator* c : r.all()) c->set_timeout(a.dist_timeout);
    r.info = r.lead ? stderr : std::fopen("/dev/null", "w");
    SYSLM_CHECK(r.info, "train: cannot open /dev/null");
    return r;
}

void check_train_args(const TrainArgs& a) {
    const bool lora = a.lora > 0 || !a.lora_init.empty();
    if (lora) {
        usage_check(!a.init.empty() && a.arch.empty(),
                    "train --lora: give the base model with --init (and a LoRA checkpoint to "
                    "continue with --resume)");
        usage_check(a.qat.empty() && !a.keep_zeros,
                    "train --lora: --qat and --keep-zeros change the base, which LoRA keeps "
                    "frozen");
        usage_check(a.lora_init.empty() || (a.lora == 0 && a.lora_targets.empty()),
                    "train --lora-init: the adapter brings its own rank and targets");
    } else {
        usage_check(a.lora_targets.empty(), "train: --lora-targets needs --lora R");
    }
    const int sources = !a.init.empty() + !a.arch.empty() + (!a.resume.empty() && !lora);
    usage_check(sources == 1,
                "train: give one of --init model.gguf (fine-tune), --arch (from "
                "scratch) or --resume checkpoint-dir");
    usage_check(!a.data.empty() + !a.ids.empty() + a.synthetic == 1,
                "train: give exactly one data source: --data, --ids or --synthetic-data");
    usage_check(a.eval_every == 0 || !a.data.empty(),
                "train: --eval-every needs --data (its val split)");
    usage_check(a.patience == 0 || a.eval_every > 0, "train: --patience needs --eval-every");
    usage_check(a.checkpoint_every == 0 || !a.checkpoint.empty(),
                "train: --checkpoint-every needs --checkpoint DIR");
    usage_check(a.min_lr <= a.lr, "train: --min-lr ", a.min_lr, " is above --lr ", a.lr);
    usage_check(
        !a.arch.empty() || !a.structure.any(),
        "train: --window, --attn-pattern, --global-tokens, --linear-attn, --share-blocks, --conv "
        "and --swish-beta shape a model from scratch (--arch); a file's own structure comes "
        "with it");
    SYSLM_CHECK(a.offline_topk == 0 || (!a.teacher.empty() && !a.data.empty()),
                "train: --offline-topk needs --teacher and --data");
}

// The model.gguf of --resume's checkpoint, recovered first where a kill interrupted its write.
std::string resume_model(const TrainArgs& a, const RankLayout& r) {
    // A run killed between the renames of a checkpoint write left <dir>.tmp and <dir>.old:
    // the newest complete one becomes <dir> again (train/checkpoint_files.hpp).
    bool found = true;
    if (r.lead) found = train::recover_checkpoint(a.resume);
    if (r.world->size() > 1) {
        double ok = found ? 1 : 0;
        r.world->broadcast(&ok, sizeof ok, 0);
        found = ok > 0;
    }
    SYSLM_CHECK(found, "train: --resume ", a.resume, ": no checkpoint there (nor ", a.resume,
                ".tmp or ", a.resume, ".old from an interrupted write)");
    return (std::filesystem::path(a.resume) / "model.gguf").string();
}

// The weights a run starts from: --resume's checkpoint (LoRA: --init's base, the checkpoint holding
// the adapter), --init's file, or, for --arch, a random-initialised file (deleted once mapped).
io::GGUFFile open_start_weights(const TrainArgs& a, const RankLayout& r) {
    if (!a.resume.empty() && a.init.empty()) return io::GGUFFile(resume_model(a, r));
    if (a.arch.empty()) return io::GGUFFile(a.init);
    usage_check(!a.tokenizer.empty() || (a.vocab > 0 && a.data.empty()),
                "train: --arch needs --tokenizer (a GGUF with a vocabulary), or with "
                "--synthetic-data or --ids, --vocab N (a byte-fallback vocabulary of N tokens)");
    model::InitConfig c;
    c.arch = a.arch;
    c.n_layer = a.layers;
    c.n_head = a.heads;
    c.n_head_kv = a.kv_heads;
    c.n_embd = a.dim;
    c.n_ff = a.ffn;
    c.n_expert = a.experts;
    c.n_expert_used = a.experts > 0 ? a.experts_used : 0;
    c.expert_top_p = a.expert_top_p;
    c.n_expert_used_min = a.experts_used_min;
    c.n_ctx = a.ctx;
    c.seed = a.seed;
    apply_structure_options(a.structure, "train", c);
    const std::string temp = (std::filesystem::temp_directory_path() /
                              ("syslm-train-init-" + std::to_string(getpid()) + ".gguf"))
                                 .string();
    std::string vocab = a.tokenizer, temp_vocab;
    if (vocab.empty())
        vocab = temp_vocab = write_byte_fallback_vocab(a.vocab, temp + ".vocab.gguf");
    model::write_random_model(c, vocab, temp);
    if (!temp_vocab.empty()) std::filesystem::remove(temp_vocab);
    io::GGUFFile file(temp);
    std::filesystem::remove(temp);  // the mapping stays valid
    return file;
}

// --precision auto: bf16 where this CPU's bf16 training GEMM measured clearly faster than its f32
// one (the rest of a step stays f32, and bf16 rounding costs a little quality).
std::string choose_precision(const TrainArgs& a, const RankLayout& r) {
    if (a.precision != "auto") return a.precision;
    const kernels::TrainGemmChoice& c = kernels::train_gemm_choice();
    const double f32 = kernels::train_gemm_gflops(c.f32);
    const double bf16 = c.bf16 == kernels::TrainGemm::None ? 0 : kernels::train_gemm_gflops(c.bf16);
    int use_bf16 = bf16 > 1.25 * f32;
    r.world->broadcast(&use_bf16, sizeof use_bf16, 0);  // every rank as rank 0 measured
    const std::string precision = use_bf16 ? "bf16" : "f32";
    const std::string bf16_text = c.bf16 == kernels::TrainGemm::None
                                      ? std::string("not available")
                                      : std::string("on ") + kernels::train_gemm_name(c.bf16) +
                                            " " + std::to_string(static_cast<int>(bf16)) +
                                            " GFLOP/s";
    std::fprintf(r.info,
                 "precision auto: %s (training GEMMs measured: f32 on %s %.0f GFLOP/s, bf16 %s)\n",
                 precision.c_str(), kernels::train_gemm_name(c.f32), f32, bf16_text.c_str());
    return precision;
}

// Sequences per micro-batch and micro-batches per step: as given, or, under --token-budget /
// --memory-limit, the step's sequences split into the largest micro-batch that fits.
std::pair<int, int> plan_step(const TrainArgs& a, train::TrainModel& model, FILE* info) {
    int batch = a.batch, accum = a.accum;
    if (a.micro_batches > 0) {
        SYSLM_CHECK(a.accum == 1 || a.accum == a.micro_batches, "train: --micro-batches ",
                    a.micro_batches, " and --accum ", a.accum, " disagree");
        accum = a.micro_batches;
    }
    if (a.token_budget == 0 && a.memory_limit.empty()) return {batch, accum};
    const int sequences = a.token_budget > 0
                              ? std::max<int>(1, static_cast<int>(a.token_budget / a.seq))
                              : a.batch * a.accum;
    const size_t limit = a.memory_limit.empty() ? 0 : train::parse_memory_size(a.memory_limit);
    const train::BatchPlan bp =
        train::plan_batches(model, train::optimizer_kind(a.optimizer), a.seq, sequences, limit);
    std::fprintf(info,
                 "batch: %d sequences of %d tokens per step = %d micro-batches of %d "
                 "(estimated %zu MiB%s)\n",
                 sequences, a.seq, bp.accum, bp.micro_batch, bp.bytes >> 20,
                 limit ? (" of " + std::to_string(limit >> 20) + " MiB").c_str() : "");
    return {bp.micro_batch, bp.accum};
}

// With data parallelism the source makes the global batch (ranks x batch sequences) and each
// rank trains on its slice of it.
std::unique_ptr<train::BatchSource> open_batches(const TrainArgs& a, const RankLayout& r,
                                                 int n_vocab, int batch, int accum) {
    const int global = batch * r.mesh.dp;
    std::unique_ptr<train::BatchSource> data;
    if (uses_strata(a))
        data = open_strata(a, n_vocab, global, accum);
    else if (!a.data.empty())
        data = std::make_unique<train::ShardBatches>(a.data, a.seed, n_vocab, global, a.seq);
    else if (a.synthetic)
        data = std::make_unique<train::SyntheticBatches>(a.seed, n_vocab, global, a.seq);
    else
        data = std::make_unique<train::FixedBatch>(parse_token_ids(a.ids, "--ids"), global, a.seq);
    if (r.mesh.dp == 1) return data;
    std::fprintf(r.info, "data parallel: %d ranks (%s) x %d sequences per micro-batch\n", r.mesh.dp,
                 r.world->transport().c_str(), batch);
    return std::make_unique<train::RankSlice>(std::move(data), r.replicas().rank(), r.mesh.dp,
                                              batch, a.seq);
}

// "MIN:MAX" of --window-range, 1 <= MIN <= MAX.
std::pair<int, int> parse_window_range(const std::string& s) {
    int lo = 0, hi = 0;
    const char* end = s.data() + s.size();
    const auto a = std::from_chars(s.data(), end, lo);
    const bool ok = a.ec == std::errc() && a.ptr != end && *a.ptr == ':' &&
                    std::from_chars(a.ptr + 1, end, hi).ptr == end;
    usage_check(ok && lo >= 1 && lo <= hi && hi <= (1 << 24), "train: --window-range '", s,
                "': give MIN:MAX with 1 <= MIN <= MAX <= 16777216, e.g. 64:512");
    return {lo, hi};
}

// --window-range: the windows the steps draw (train/trainer.hpp).
void set_window_range(const TrainArgs& a, const model::HParams& hp, train::TrainOptions& opt) {
    if (a.window_range.empty()) return;
    const auto [lo, hi] = parse_window_range(a.window_range);
    SYSLM_CHECK(hp.sliding_window > 0,
                "train: --window-range needs local attention layers (--window W from scratch, "
                "or a file with attention.sliding_window)");
    opt.window_min = lo;
    opt.window_max = hi;
    opt.window_seed = a.seed ^ 0x77696e646f77ULL;
}

// MoE: the experts per token of the last step and the share capacity dropped.
void report_experts(const train::TrainModel& model, nlohmann::json& summary, FILE* info) {
    if (model.hparams().n_expert == 0) return;
    summary["experts_per_token"] = model.experts_per_token();
    summary["dropped_share"] = model.dropped_share();
    std::fprintf(info,
                 "experts per token (last step): %.3f of at most %d; %.1f%% of choices dropped "
                 "by capacity\n",
                 model.experts_per_token(), model.hparams().n_expert_used,
                 100 * model.dropped_share());
}

// The optimizer, schedules, clipping and the data-parallel reduction's settings.
train::TrainOptions step_options(const TrainArgs& a, const RankLayout& r, int batch, int accum,
                                 train::Precision precision) {
    train::TrainOptions opt;
    opt.data_parallel = r.mesh.dp > 1 ? &r.replicas() : nullptr;
    SYSLM_CHECK(a.zero == 0 || r.mesh.dp > 1, "train: --zero ", a.zero,
                " shards over data-parallel ranks: run under mpirun with more than one");
    opt.zero = a.zero;
    opt.grad_compress = parallel::compression_kind(a.grad_compress);
    opt.topk_ratio = a.topk_ratio;
    opt.compress_warmup = a.compress_warmup;
    SYSLM_CHECK(
        opt.grad_compress == parallel::Compression::None || r.mesh.dp > 1,
        "train: --grad-compress ", a.grad_compress,
        " compresses the data-parallel reduction: run under mpirun with more than one rank");
    opt.B = batch;
    opt.T = a.seq;
    opt.steps = a.steps;
    opt.accum = accum;
    opt.clip = a.clip;
    opt.keep_zeros = a.keep_zeros;
    if (precision == train::Precision::F16) {  // fp16's range needs loss scaling
        opt.loss_scale = a.loss_scale;
        opt.scale_window = a.loss_scale_window;
    }
    std::string lr_schedule = "cosine";
    train::PipelineSchedule pipeline_schedule = train::PipelineSchedule::OneFOneB;
    for (const std::string& v : a.schedule) {
        if (v == "gpipe" || v == "1f1b")
            pipeline_schedule = train::pipeline_schedule(v);
        else
            lr_schedule = v;
    }
    opt.schedule = {train::schedule_kind(lr_schedule), a.lr, a.min_lr, a.warmup, a.steps};
    opt.pipeline = r.mesh.pp > 1 ? r.groups.pp.get() : nullptr;
    opt.pipeline_schedule = pipeline_schedule;
    opt.optimizer.kind = train::optimizer_kind(a.optimizer);
    opt.optimizer.beta1 = a.beta1;
    opt.optimizer.beta2 = a.beta2;
    opt.optimizer.eps = a.eps;
    opt.optimizer.weight_decay = a.weight_decay;
    opt.optimizer.momentum = a.momentum;
    opt.optimizer.nesterov = a.nesterov;
    opt.optimizer.decay_embeddings = a.decay_embeddings;
    if (r.mesh.pp > 1)
        std::fprintf(r.info,
                     "pipeline parallel: %d stages, %d micro-batches per step, schedule %s\n",
                     r.mesh.pp, accum,
                     pipeline_schedule == train::PipelineSchedule::GPipe ? "gpipe" : "1f1b");
    return opt;
}

// --qat: fake-quantize exactly the matrices `syslm quantize` will quantize, to the type it will
// choose for each.
std::optional<compress::QuantTarget> set_up_qat(const TrainArgs& a, const io::GGUFFile& file,
                                                train::TrainModel& model, train::TrainOptions& opt,
                                                FILE* info) {
    if (a.qat.empty()) return std::nullopt;
    std::optional<compress::QuantTarget> qat = compress::parse_quant_target(a.qat);
    SYSLM_CHECK(qat && dtype_info(qat->type).quantized, "train: --qat ", a.qat,
                " is not a quantized type (e.g. Q4_0, Q8_0, Q4_K_M)");
    compress::ModelFacts facts;
    facts.architecture = file.get_string("general.architecture", "");
    facts.has_output = file.find_tensor("output.weight") != nullptr;
    facts.n_layer = static_cast<uint32_t>(model.hparams().n_layer);
    facts.n_head = static_cast<uint32_t>(model.hparams().n_head);
    facts.n_head_kv = static_cast<uint32_t>(model.hparams().n_head_kv);
    facts.expert_count = static_cast<uint32_t>(model.hparams().n_expert);
    for (const train::Param& p : model.params().params()) {
        const compress::TypeChoice c =
            compress::choose_tensor_type(p.name, DType::F32, p.ne, *qat, facts);
        if (c.quantize && dtype_info(c.type).quantized) opt.fake_quant.emplace_back(p.name, c.type);
    }
    std::fprintf(info, "qat: %zu matrices fake-quantized for %s\n", opt.fake_quant.size(),
                 compress::quant_target_name(*qat).c_str());
    return qat;
}

// --teacher: the teacher online, or its top-k logits cached once over the data (--offline-topk);
// --distill-hidden adds the hidden-state loss and the student's projections.
struct Distillation {
    std::unique_ptr<train::Teacher> teacher;
    std::unique_ptr<train::TeacherCache> cache;
};

Distillation set_up_distillation(const TrainArgs& a, const RankLayout& r, train::TrainModel& model,
                                 train::TrainOptions& opt) {
    Distillation d;
    constexpr const char* kHiddenNeedsTeacher =
        "train: --distill-hidden needs an online --teacher (the offline cache of --offline-topk "
        "keeps logits only)";
    if (a.teacher.empty()) {
        SYSLM_CHECK(a.distill_hidden == 0, kHiddenNeedsTeacher);
        return d;
    }
    d.teacher = std::make_unique<train::Teacher>(a.teacher, a.seq, a.threads);
    opt.distill_alpha = a.distill_alpha;
    opt.distill_temperature = a.distill_temperature;
    if (a.offline_topk > 0) {  // the teacher runs once over the data; its top-k are reused
        const std::string path =
            !a.teacher_cache.empty()
                ? a.teacher_cache
                : (std::filesystem::path(a.data) / ("teacher-top" + std::to_string(a.offline_topk) +
                                                    "-seq" + std::to_string(a.seq) + ".cache"))
                      .string();
        if (!std::filesystem::exists(path) && r.lead)  // one writer; the others wait for it
            train::build_teacher_cache(path, a.data, a.teacher, *d.teacher, a.seq, a.offline_topk,
                                       &std::cerr);
        r.world->barrier();
        d.cache = std::make_unique<train::TeacherCache>(path, a.data, a.teacher, a.seq,
                                                        a.offline_topk, model.hparams().n_vocab);
        opt.teacher_cache = d.cache.get();
        d.teacher.reset();
    } else {
        opt.teacher = d.teacher.get();
    }
    std::fprintf(
        r.info, "distill: teacher %s (%s), alpha %.2f, temperature %.2f\n", a.teacher.c_str(),
        a.offline_topk > 0 ? ("offline top-" + std::to_string(a.offline_topk)).c_str() : "online",
        a.distill_alpha, a.distill_temperature);
    if (a.distill_hidden > 0) {
        SYSLM_CHECK(opt.teacher, kHiddenNeedsTeacher);
        std::vector<int> student, teach;
        std::string pairs;
        for (const auto& [s, t] : train::hidden_layer_map(
                 model.hparams().n_layer, d.teacher->n_layer(), a.distill_hidden_layers)) {
            student.push_back(s);
            teach.push_back(t);
            pairs += " " + std::to_string(s) + "->" + std::to_string(t);
        }
        model.match_hidden(student, d.teacher->n_embd(), a.seed ^ 0x68696464656eULL);
        opt.teacher_layers = teach;
        opt.distill_hidden = a.distill_hidden;
        std::fprintf(r.info,
                     "distill: hidden states of blocks (student->teacher)%s, projected %d -> %d, "
                     "weight %.3g\n",
                     pairs.c_str(), model.hparams().n_embd, d.teacher->n_embd(), a.distill_hidden);
    }
    return d;
}

// MFU's denominator: the peak of the arithmetic the matmuls run on, bf16 on the engine the
// training GEMMs chose (AMX tiles or vdpbf16ps); f32 and the emulated path have the f32 peak.
double matmul_peak_flops(train::Precision precision, int threads) {
    const profile::ProbeResult probe = profile::cached_or_measured_probe(0, false);
    const kernels::TrainGemm bf16_gemm = kernels::train_gemm_choice().bf16;
    const bool bf16 = precision == train::Precision::BF16;
    if (bf16 && bf16_gemm == kernels::TrainGemm::AmxBF16 && probe.amx_bf16 > 0)
        return probe.amx_bf16_for(threads) * 1e9;
    if (bf16 && bf16_gemm == kernels::TrainGemm::BF16Panels && probe.bf16 > 0)
        return probe.bf16_for(threads) * 1e9;
    return probe.fma_f32_for(threads) * 1e9;
}

// What the step loop measured and how it ended.
struct LoopOutcome {
    double timed = 0, first_loss = NAN, final_loss = 0, best_val = INFINITY;
    int64_t timed_steps = 0;
    bool interrupted = false;
    std::vector<double> stratum_loss;  // summed train loss and steps per stratum
    std::vector<int64_t> stratum_steps;
    uint64_t last_step_bytes = 0;  // sent by this rank (compression's warm-up steps are exact)
    double seconds_per_step() const { return timed / std::max<int64_t>(1, timed_steps); }
    void count_stratum(const train::StepStats& s, size_t n_strata) {
        if (s.stratum < 0) return;
        stratum_loss.resize(n_strata);
        stratum_steps.resize(n_strata);
        stratum_loss[static_cast<size_t>(s.stratum)] += s.loss;
        ++stratum_steps[static_cast<size_t>(s.stratum)];
    }
};

// Everything the step loop works with.
struct TrainLoop {
    const TrainArgs& a;
    const RankLayout& r;
    train::TrainModel& model;
    train::Trainer& trainer;
    train::BatchSource& data;
    backend::CpuBackend& be;
    int batch;
    double step_flops, peak, tokens_per_step;
    std::function<void(const nlohmann::json&)> log;
    std::function<void()> save;  // every rank calls it (rank 0 writes; ZeRO: each its shard)
    std::vector<train::StratumInfo> strata;  // of --data with --stratum-lr / --curriculum
};

// One step's progress: a live line on a terminal (rewritten each step, kept every --log-every
// steps); in a log file only the kept lines; every step in the metrics file.
void report_step(const TrainLoop& L, const train::StepStats& s, const LoopOutcome& o, bool live,
                 bool keep) {
    const double sps = o.timed_steps ? o.timed / o.timed_steps : s.seconds;
    const double tps = L.tokens_per_step / sps, mfu = L.step_flops / sps / L.peak;
    if (live || keep) {
        std::fprintf(L.r.info,
                     "%sstep %lld/%lld | loss %.4f | grad norm %.3f | lr %.2e | %.0f tok/s | "
                     "MFU %.1f%% | ETA %s   %s",
                     live ? "\r" : "", static_cast<long long>(s.step + 1),
                     static_cast<long long>(L.a.steps), s.loss, s.grad_norm, s.lr, tps, 100 * mfu,
                     eta(sps * static_cast<double>(L.a.steps - s.step - 1)).c_str(),
                     keep ? "\n" : "");
        std::fflush(L.r.info);
    }
    if (s.skipped)
        std::fprintf(L.r.info,
                     "%sstep %lld: gradients overflowed at loss scale %g: skipped, scale halved\n",
                     live ? "\n" : "", static_cast<long long>(s.step + 1),
                     static_cast<double>(s.loss_scale));
    nlohmann::json j{
        {"step", s.step + 1},   {"loss", s.loss}, {"loss_scale", s.loss_scale},
        {"skipped", s.skipped}, {"lr", s.lr},     {"grad_norm", s.grad_norm},
        {"tokens_per_s", tps},  {"mfu", mfu},     {"waited_ms", 1e3 * L.data.waited_s()}};
    if (s.stratum >= 0) j["stratum"] = L.strata[static_cast<size_t>(s.stratum)].name;
    L.log(j);
}

// The val loss after step s where --eval-every asks; true when --patience says stop.
bool evaluate_step(const TrainLoop& L, const train::StepStats& s, LoopOutcome& o,
                   int& evals_without_gain, bool newline) {
    if (L.a.eval_every == 0 || ((s.step + 1) % L.a.eval_every != 0 && !L.trainer.done()))
        return false;
    L.trainer.publish_master();
    const double val = train::evaluate(L.model, L.a.data, L.batch, L.a.seq, L.a.eval_batches, L.be);
    std::fprintf(L.r.info, "%sstep %lld: val loss %.4f (data wait so far %.0f ms)\n",
                 newline ? "\n" : "", static_cast<long long>(s.step + 1), val,
                 1e3 * L.data.waited_s());
    nlohmann::json j{{"step", s.step + 1}, {"val_loss", val}};
    if (!L.strata.empty()) {  // the loss per stratum (per task)
        const nlohmann::json per =
            evaluate_strata(L.model, L.strata, L.batch, L.a.seq, L.a.eval_batches, L.be);
        for (const auto& [name, loss] : per.items()) {
            if (loss.is_null())
                std::fprintf(L.r.info, "  %s: val split under one batch\n", name.c_str());
            else
                std::fprintf(L.r.info, "  %s %.4f\n", name.c_str(), loss.get<double>());
            j[name] = loss;
        }
    }
    L.log(j);
    if (val < o.best_val) {
        o.best_val = val;
        evals_without_gain = 0;
        return false;
    }
    if (L.a.patience == 0 || ++evals_without_gain < L.a.patience) return false;
    std::fprintf(L.r.info, "early stop: no val improvement in %d evaluations\n", L.a.patience);
    return true;
}

// The profile of the steps after the first (warm-up), as the speed figures count them.
void profile_report(const TrainLoop& L, const LoopOutcome& o) {
    if (!L.a.profile) return;
    const auto ops = profiler::collect();
    double total = 0;
    for (const auto& op : ops) total += op.seconds;
    std::fprintf(L.r.info, "\nprofile of %lld steps (%.1f s in profiled ops of %.1f s)\n",
                 static_cast<long long>(o.timed_steps), total, o.timed);
    std::fprintf(L.r.info, "%-18s %8s %10s %7s %10s\n", "op", "calls", "time s", "time %",
                 "GFLOP/s");
    for (const auto& op : ops)
        std::fprintf(L.r.info, "%-18s %8llu %10.3f %6.1f%% %10.1f\n", op.name.c_str(),
                     static_cast<unsigned long long>(op.calls), op.seconds,
                     100 * op.seconds / std::max(o.timed, 1e-9), op.flops / op.seconds / 1e9);
}

// Steps until --steps, an early stop or Ctrl-C (every rank stops at the same step); checkpoints
// every --checkpoint-every steps and when interrupted.
LoopOutcome run_steps(const TrainLoop& L) {
    LoopOutcome o;
    int evals_without_gain = 0;
    bool stopped_early = false;
    const int64_t first = L.trainer.next_step();
    const bool live = L.r.lead && isatty(fileno(stderr)) != 0;
    std::signal(SIGINT, on_sigint);
    while (!L.trainer.done()) {
        if (L.a.profile && L.trainer.next_step() == first + 1) profiler::set_enabled(true);
        L.r.world->set_context("training step " + std::to_string(L.trainer.next_step() + 1));
        const uint64_t sent_before = L.r.bytes_sent();
        const train::StepStats s = L.trainer.step();
        o.last_step_bytes = L.r.bytes_sent() - sent_before;
        o.final_loss = s.loss;
        if (std::isnan(o.first_loss)) o.first_loss = s.loss;
        o.count_stratum(s, L.strata.size());
        if (s.step > first || L.a.steps - first == 1) {  // the first step includes warm-up
            o.timed += s.seconds;
            ++o.timed_steps;
        }
        const bool keep = (s.step + 1) % L.a.log_every == 0 || s.step + 1 == L.a.steps;
        report_step(L, s, o, live, keep);
        stopped_early = evaluate_step(L, s, o, evals_without_gain, live && !keep);
        if (g_interrupted) o.interrupted = true;
        if (L.r.mesh.dp > 1) {
            double any = o.interrupted ? 1 : 0;
            L.r.world->all_reduce_sum(&any, 1);
            o.interrupted = any > 0;
        }
        const bool periodic = L.a.checkpoint_every > 0 && (s.step + 1) % L.a.checkpoint_every == 0;
        if (!L.a.checkpoint.empty() && (periodic || o.interrupted)) L.save();
        if (o.interrupted || stopped_early) break;
    }
    std::signal(SIGINT, SIG_DFL);
    profile_report(L, o);
    if (o.interrupted)
        std::fprintf(L.r.info, "\ninterrupted at step %lld%s\n",
                     static_cast<long long>(L.trainer.next_step()),
                     L.a.checkpoint.empty() ? "" : ": resume with --resume <checkpoint>");
    // A final checkpoint unless the last step just wrote one.
    if (!L.a.checkpoint.empty() && !o.interrupted && L.a.checkpoint_every > 0 &&
        L.trainer.next_step() % L.a.checkpoint_every != 0)
        L.save();
    return o;
}

// Steps and mean train loss per stratum, with its learning-rate scale.
void report_strata(const std::vector<train::StratumInfo>& strata, const std::vector<float>& lr,
                   const LoopOutcome& o, nlohmann::json& summary, FILE* info) {
    if (o.stratum_steps.empty()) return;
    std::fprintf(info, "%-24s %8s %8s %10s\n", "stratum", "lr scale", "steps", "train loss");
    for (size_t i = 0; i < strata.size(); ++i) {
        const int64_t n = o.stratum_steps[i];
        const double mean = n ? o.stratum_loss[i] / static_cast<double>(n) : NAN;
        std::fprintf(info, "%-24s %8.3f %8lld %10.4f\n", strata[i].name.c_str(),
                     static_cast<double>(lr[i]), static_cast<long long>(n), mean);
        summary["strata"].push_back({{"name", strata[i].name},
                                     {"lr_scale", lr[i]},
                                     {"steps", n},
                                     {"mean_train_loss", n ? nlohmann::json(mean) : nullptr}});
    }
}

void report_parallelism(const TrainArgs& a, const RankLayout& r, const train::Trainer& trainer,
                        const LoopOutcome& o, int accum) {
    if (r.mesh.dp > 1) {
        std::string how;
        if (a.zero > 0)
            how += " (ZeRO-" + std::to_string(a.zero) + ")";
        else if (a.grad_compress != "none")
            how += " (sharded: compressed updates)";
        if (a.grad_compress != "none") how += ", gradients compressed: " + a.grad_compress;
        std::fprintf(r.info,
                     "data parallel: %.2f s reducing gradients (%.3f MiB sent per rank in the last "
                     "step), %.0f%% of it hidden behind the backward; optimizer state %.1f MiB per "
                     "rank%s\n",
                     trainer.comm_seconds(), static_cast<double>(o.last_step_bytes) / (1 << 20),
                     100 * trainer.overlap(),
                     static_cast<double>(trainer.optimizer_state_bytes()) / (1 << 20), how.c_str());
    }
    if (r.mesh.pp > 1)
        std::fprintf(r.info,
                     "pipeline: %.1f%% of stage 0's schedule time waiting for its "
                     "neighbours (theoretical bubble (p - 1) / (m + p - 1) = %.1f%%)\n",
                     100 * trainer.bubble(), 100.0 * (r.mesh.pp - 1) / (accum + r.mesh.pp - 1));
}

// --lora / --lora-init / a LoRA --resume: what the adapter starts from.
std::optional<train::LoraSpec> lora_spec(const TrainArgs& a, const RankLayout& r) {
    if (a.lora == 0 && a.lora_init.empty()) return std::nullopt;
    train::LoraSpec s;
    s.rank = a.lora;
    s.alpha = a.lora_alpha;
    s.seed = a.seed;
    if (!a.lora_targets.empty()) s.targets = train::parse_lora_targets(a.lora_targets);
    s.init = a.resume.empty() ? a.lora_init : resume_model(a, r);
    return s;
}

void report_lora(const train::TrainModel& model, const io::GGUFFile& file, FILE* info) {
    double base = 0;
    for (const io::GGUFTensor& t : file.tensors()) base += static_cast<double>(t.numel());
    const auto& ps = model.params().params();
    size_t pairs = 0, rank = 0;
    for (const train::Param& p : ps)
        if (p.name.ends_with(".lora_a")) {
            ++pairs;
            rank = std::max(rank, static_cast<size_t>(p.ne[1]));
        }
    std::fprintf(info,
                 "LoRA: %zu pairs of rank %zu, alpha %g: %.2f M trained parameters (%.2f%% of the "
                 "base's %.1f M, frozen in its own types)\n",
                 pairs, rank, static_cast<double>(model.lora_alpha()),
                 static_cast<double>(model.params().size()) / 1e6,
                 100.0 * static_cast<double>(model.params().size()) / base, base / 1e6);
}

// The trained weights at --out (rank 0), gathered first from tensor / pipeline ranks; with --qat
// the float master beside it and the quantized export at --out.
void write_weights(const TrainArgs& a, const RankLayout& r, train::TrainModel& model,
                   const io::GGUFFile& file, const std::optional<compress::QuantTarget>& qat) {
    if (a.out.empty()) return;
    std::optional<train::ParamStore> whole;
    if (r.mesh.tp > 1) whole = model.params().gathered(*r.groups.tp);
    if (r.mesh.pp > 1)  // each stage's whole tensors, then every stage's on stage 0
        whole = (whole ? *whole : model.params()).gathered_stages(*r.groups.pp, file);
    if (!r.lead) return;
    const train::ParamStore& params = whole ? *whole : model.params();
    if (model.lora()) {
        params.write_gguf(a.out, train::lora_metadata(file, model.lora_alpha()));
        std::fprintf(r.info, "wrote %s (LoRA adapter)\n", a.out.c_str());
        return;
    }
    if (!qat) {
        params.write_gguf(a.out, file.metadata(), false, &file);
        std::fprintf(r.info, "wrote %s\n", a.out.c_str());
        return;
    }
    std::string master = a.out;
    if (master.ends_with(".gguf")) master.resize(master.size() - 5);
    master += "-f32.gguf";
    params.write_gguf(master, file.metadata(), false, &file);
    compress::QuantizeOptions qo;
    qo.target = *qat;
    qo.threads = a.threads;
    compress::quantize_model(master, a.out, qo);
    std::fprintf(r.info, "wrote %s (float master weights) and %s (%s)\n", master.c_str(),
                 a.out.c_str(), compress::quant_target_name(*qat).c_str());
}

// Pipeline stage pp_i holds blocks [pp_i L / pp, (pp_i + 1) L / pp).
train::PipelineStage pipeline_stage(const RankLayout& r, int n_layer) {
    if (r.mesh.pp <= 1) return {};
    SYSLM_CHECK(n_layer >= r.mesh.pp, "train: --pp ", r.mesh.pp, " stages for ", n_layer,
                " blocks");
    return {r.at.pp * n_layer / r.mesh.pp, (r.at.pp + 1) * n_layer / r.mesh.pp};
}

// The command line's vocabulary and sequence length against the model's.
void check_fits_model(const TrainArgs& a, const model::HParams& hp) {
    if (a.vocab > 0)
        usage_check(hp.n_vocab == a.vocab, "train: --vocab ", a.vocab, " but the model has ",
                    hp.n_vocab, " tokens");
    usage_check(a.seq <= hp.n_ctx_train, "train: --seq ", a.seq,
                " is longer than the model's context of ", hp.n_ctx_train, " positions (",
                a.arch.empty() ? "its context_length" : "--ctx", ")");
}

}  // namespace

int run_train(const TrainArgs& a) {
    check_train_args(a);
    const RankLayout r = make_rank_layout(a);
    const io::GGUFFile file = open_start_weights(a, r);
    const std::optional<train::LoraSpec> lora = lora_spec(a, r);
    train::TrainModel model(file, parallel::recompute_policy(a.recompute), r.groups.tp.get(),
                            pipeline_stage(r, model::load_hparams(file).n_layer),
                            lora ? &*lora : nullptr);
    if (model.lora()) report_lora(model, file, r.info);
    // Checkpoints hold the model, or with LoRA the adapter.
    const auto saved_metadata =
        model.lora() ? train::lora_metadata(file, model.lora_alpha()) : file.metadata();
    model.set_router_aux_coef(a.moe_aux_coef);
    model.set_router_z_coef(a.router_z_coef);
    model.set_expert_capacity(a.expert_capacity);
    const std::string precision = choose_precision(a, r);
    model.set_precision(train::precision_mode(precision));
    const int n_vocab = model.hparams().n_vocab;
    check_fits_model(a, model.hparams());
    const auto [batch, accum] = plan_step(a, model, r.info);
    const std::unique_ptr<train::BatchSource> data = open_batches(a, r, n_vocab, batch, accum);
    const std::vector<train::StratumInfo> strata =
        uses_strata(a) ? train::read_strata(a.data) : std::vector<train::StratumInfo>{};
    if (r.mesh.tp > 1)
        std::fprintf(r.info,
                     "tensor parallel: %d ranks per replica, each with %d of %d heads and "
                     "%d of %d FFN channels\n",
                     r.mesh.tp, model.hparams().n_head, model.hparams().n_head * r.mesh.tp,
                     model.hparams().n_ff, model.hparams().n_ff * r.mesh.tp);
    train::TrainOptions opt = step_options(a, r, batch, accum, model.precision());
    if (!strata.empty()) opt.stratum_lr = stratum_lr_scales(a.stratum_lr, strata);
    set_window_range(a, model.hparams(), opt);
    const std::optional<compress::QuantTarget> qat = set_up_qat(a, file, model, opt, r.info);
    backend::CpuBackend be(a.threads);
    const Distillation distill = set_up_distillation(a, r, model, opt);
    train::Trainer trainer(model, *data, opt, be);
    if (!a.resume.empty()) {
        trainer.load_state(a.resume);
        std::fprintf(r.info, "resumed %s at step %lld\n", a.resume.c_str(),
                     static_cast<long long>(trainer.next_step()));
    }
    std::ofstream metrics;
    if (!a.metrics.empty() && r.lead) {
        metrics.open(a.metrics, std::ios::app);
        SYSLM_CHECK(metrics, a.metrics, ": cannot open the metrics file");
    }
    auto log = [&](const nlohmann::json& j) {
        if (metrics.is_open()) metrics << j.dump() << "\n" << std::flush;
    };
    auto save = [&] {
        r.world->set_timeout(0);  // writing may take longer than a collective may wait
        trainer.save_checkpoint(a.checkpoint, saved_metadata, model.lora() ? nullptr : &file);
        std::fprintf(r.info, "checkpoint %s (step %lld)\n", a.checkpoint.c_str(),
                     static_cast<long long>(trainer.next_step()));
        if (r.mesh.dp > 1) r.world->set_timeout(a.dist_timeout);
    };
    // Throughput of the whole group; MFU against the peak of every rank's threads.
    const double step_flops = flops_per_token(model, a.seq, file) * batch * a.seq * accum;
    const double tokens_per_step = static_cast<double>(batch) * a.seq * accum * r.mesh.dp;
    const double peak = matmul_peak_flops(model.precision(), be.threads());
    const LoopOutcome o = run_steps({a, r, model, trainer, *data, be, batch, step_flops, peak,
                                     tokens_per_step, log, save, strata});
    report_parallelism(a, r, trainer, o, accum);
    trainer.publish_master();
    write_weights(a, r, model, file, qat);
    if (!r.lead) return o.interrupted ? 130 : 0;  // rank 0 reports
    const double sps = o.seconds_per_step();
    nlohmann::json summary{{"tokens_per_s", tokens_per_step / sps},
                           {"mfu", step_flops / sps / peak},
                           {"first_loss", o.first_loss},
                           {"final_loss", o.final_loss},
                           {"peak_rss_mib", peak_rss_mib()},
                           {"micro_batch", batch},
                           {"accum", accum},
                           {"recompute", a.recompute},
                           {"precision", precision},
                           {"threads", ThreadPool::resolve(a.threads)},
                           {"n_vocab", n_vocab},
                           {"tokens_per_step", tokens_per_step},
                           {"params", model.params().size()}};  // this rank's, under TP / PP
    if (std::isfinite(o.best_val)) summary["best_val_loss"] = o.best_val;
    report_strata(strata, opt.stratum_lr, o, summary, r.info);
    report_experts(model, summary, r.info);
    log(summary);
    if (std::isfinite(o.best_val)) std::fprintf(r.info, "best val loss %.4f\n", o.best_val);
    if (a.json) std::printf("%s\n", summary.dump().c_str());
    return o.interrupted ? 130 : 0;
}

}  // namespace syslm::cli::train_cmd
