// syslm train: train a model from scratch (--arch ...) or fine-tune one (--init model.gguf), on
// a fixed batch of ids (--ids) or random tokens (--synthetic-data, for speed), with AdamW / Lion /
// SGD, a warm-up + cosine / linear / constant schedule, gradient accumulation and clipping. Prints
// a live progress line (step, loss, tokens/s, MFU against `syslm probe`'s FP32 peak, ETA) and
// writes the trained model as GGUF (-o). With --json the last line of stdout is
// {"tokens_per_s", "mfu", "final_loss", "peak_rss_mib"}.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/token_ids.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "model/random_init.hpp"
#include "profile/machine_probe.hpp"
#include "train/trainer.hpp"

namespace syslm::cli {
namespace {

struct TrainArgs {
    // model
    std::string init, arch, tokenizer;
    int layers = 4, heads = 8, kv_heads = 0, dim = 256, ffn = 0, ctx = 1024, vocab = 0;
    uint64_t seed = 1;
    // data
    std::string ids;
    bool synthetic = false;
    // run
    int batch = 4, seq = 64, accum = 1, threads = 0, log_every = 10;
    int64_t steps = 10;
    std::string optimizer = "adamw", schedule = "cosine";
    float lr = 3e-4f, min_lr = 0.0f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    float weight_decay = 0.1f, momentum = 0.9f;
    bool nesterov = false, decay_embeddings = false;
    int64_t warmup = 0;
    double clip = 1.0;
    std::string out;
    bool json = false;
};

// FLOPs of one trained token: 6 per matrix parameter used in a matmul (forward 2, backward 4)
// plus attention's QK^T and PV over the causal half of a length-T sequence, times 3.
double flops_per_token(train::TrainModel& m, int T) {
    const auto& hp = m.hparams();
    double matrix = 0;
    bool tied = true;
    for (const train::Param& p : m.params().params()) {
        if (p.name == "output.weight") tied = false;
        if (p.ne.size() == 2 && p.name != "token_embd.weight" && p.name != "position_embd.weight")
            matrix += static_cast<double>(p.numel);
    }
    if (tied) matrix += static_cast<double>(hp.n_vocab) * hp.n_embd;
    return 6 * matrix + 6.0 * hp.n_layer * T * hp.q_dim();
}

std::string eta(double seconds) {
    const long s = static_cast<long>(seconds + 0.5);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
    return buf;
}

int run_train(const TrainArgs& a) {
    SYSLM_CHECK(a.init.empty() != a.arch.empty(),
                "train: give either --init model.gguf (fine-tune) or --arch "
                "(from scratch), not both");
    SYSLM_CHECK(a.ids.empty() != !a.synthetic,
                "train: give exactly one data source: --ids or --synthetic-data");
    std::string path = a.init;
    std::string temp;
    if (!a.arch.empty()) {
        SYSLM_CHECK(!a.tokenizer.empty(),
                    "train: --arch needs --tokenizer (a GGUF with a vocabulary)");
        model::InitConfig c;
        c.arch = a.arch;
        c.n_layer = a.layers;
        c.n_head = a.heads;
        c.n_head_kv = a.kv_heads;
        c.n_embd = a.dim;
        c.n_ff = a.ffn;
        c.n_ctx = a.ctx;
        c.seed = a.seed;
        temp = (std::filesystem::temp_directory_path() /
                ("syslm-train-init-" + std::to_string(getpid()) + ".gguf"))
                   .string();
        model::write_random_model(c, a.tokenizer, temp);
        path = temp;
    }
    const io::GGUFFile file(path);
    if (!temp.empty()) std::filesystem::remove(temp);  // the mapping stays valid
    train::TrainModel model(file);
    if (a.vocab > 0)
        SYSLM_CHECK(model.hparams().n_vocab == a.vocab, "train: --vocab ", a.vocab,
                    " but the tokenizer (", a.tokenizer, ") has ", model.hparams().n_vocab,
                    " tokens");

    std::unique_ptr<train::BatchSource> data;
    if (a.synthetic)
        data = std::make_unique<train::SyntheticBatches>(a.seed, model.hparams().n_vocab, a.batch,
                                                         a.seq);
    else
        data = std::make_unique<train::FixedBatch>(parse_token_ids(a.ids, "--ids"), a.batch, a.seq);

    train::TrainOptions opt;
    opt.B = a.batch;
    opt.T = a.seq;
    opt.steps = a.steps;
    opt.accum = a.accum;
    opt.clip = a.clip;
    opt.schedule = {train::schedule_kind(a.schedule), a.lr, a.min_lr, a.warmup, a.steps};
    opt.optimizer.kind = train::optimizer_kind(a.optimizer);
    opt.optimizer.beta1 = a.beta1;
    opt.optimizer.beta2 = a.beta2;
    opt.optimizer.eps = a.eps;
    opt.optimizer.weight_decay = a.weight_decay;
    opt.optimizer.momentum = a.momentum;
    opt.optimizer.nesterov = a.nesterov;
    opt.optimizer.decay_embeddings = a.decay_embeddings;

    ThreadPool pool(a.threads);
    const double peak = profile::cached_or_measured_probe(0, false).fma_f32_for(pool.size()) * 1e9;
    const double step_flops = flops_per_token(model, a.seq) * a.batch * a.seq * a.accum;
    const double tokens_per_step = static_cast<double>(a.batch) * a.seq * a.accum;
    double timed = 0, final_loss = 0;
    int64_t timed_steps = 0;
    train::train(model, *data, opt, pool, [&](const train::StepStats& s) {
        final_loss = s.loss;
        if (s.step > 0 || a.steps == 1) {  // step 0 includes warm-up (allocation, page faults)
            timed += s.seconds;
            ++timed_steps;
        }
        const double sps = timed_steps ? timed / timed_steps : s.seconds;
        const double tps = tokens_per_step / sps;
        std::fprintf(stderr,
                     "\rstep %lld/%lld | loss %.4f | grad norm %.3f | lr %.2e | %.0f tok/s | MFU "
                     "%.1f%% | ETA %s   ",
                     static_cast<long long>(s.step + 1), static_cast<long long>(a.steps), s.loss,
                     s.grad_norm, s.lr, tps, 100 * step_flops / sps / peak,
                     eta(sps * static_cast<double>(a.steps - s.step - 1)).c_str());
        if ((s.step + 1) % a.log_every == 0 || s.step + 1 == a.steps) std::fputc('\n', stderr);
    });
    const double sps = timed / std::max<int64_t>(1, timed_steps);
    if (!a.out.empty()) {
        model.params().write_gguf(a.out, file.metadata(), false, &file);
        std::fprintf(stderr, "wrote %s\n", a.out.c_str());
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    if (a.json)
        std::printf("%s\n", nlohmann::json{{"tokens_per_s", tokens_per_step / sps},
                                           {"mfu", step_flops / sps / peak},
                                           {"final_loss", final_loss},
                                           {"peak_rss_mib", ru.ru_maxrss / 1024.0}}
                                .dump()
                                .c_str());
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<TrainArgs>();
    app.add_option("--init", a->init, "Fine-tune this GGUF model")->check(CLI::ExistingFile);
    app.add_option("--arch", a->arch, "Train from scratch: llama | qwen2 | gpt2")
        ->check(CLI::IsMember({"llama", "qwen2", "gpt2"}));
    app.add_option("--layers", a->layers, "From scratch: layers")->capture_default_str();
    app.add_option("--heads", a->heads, "From scratch: attention heads")->capture_default_str();
    app.add_option("--kv-heads", a->kv_heads, "From scratch: KV heads (0: as --heads)");
    app.add_option("--dim", a->dim, "From scratch: embedding width")->capture_default_str();
    app.add_option("--ffn", a->ffn, "From scratch: FFN width (0: the architecture's default)");
    app.add_option("--ctx", a->ctx, "From scratch: context length")->capture_default_str();
    app.add_option("--tokenizer", a->tokenizer, "From scratch: GGUF whose tokenizer to use")
        ->check(CLI::ExistingFile);
    app.add_option("--vocab", a->vocab, "Expected vocabulary size (checked against the tokenizer)");
    app.add_option("--seed", a->seed, "Seed of the initialisation and synthetic data")
        ->capture_default_str();
    app.add_option("--ids", a->ids, "Data: one fixed batch, --batch sequences of --seq + 1 ids");
    app.add_flag("--synthetic-data", a->synthetic, "Data: uniformly random tokens (benchmarks)");
    app.add_option("-b,--batch", a->batch, "Sequences per micro-batch")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--seq", a->seq, "Tokens per sequence")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--steps", a->steps, "Optimizer steps")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
    app.add_option("--accum", a->accum, "Micro-batches per step (gradient accumulation)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--optimizer", a->optimizer, "adamw | lion | sgd")->capture_default_str();
    app.add_option("--lr", a->lr, "Peak learning rate")->capture_default_str();
    app.add_option("--min-lr", a->min_lr, "Learning rate at the end of the decay")
        ->capture_default_str();
    app.add_option("--warmup", a->warmup, "Linear warm-up steps")->capture_default_str();
    app.add_option("--schedule", a->schedule, "cosine | linear | constant")->capture_default_str();
    app.add_option("--beta1", a->beta1, "AdamW / Lion beta1")->capture_default_str();
    app.add_option("--beta2", a->beta2, "AdamW / Lion beta2")->capture_default_str();
    app.add_option("--eps", a->eps, "AdamW epsilon")->capture_default_str();
    app.add_option("--weight-decay", a->weight_decay,
                   "Decay of the matrices (not norms, biases, "
                   "embeddings)")
        ->capture_default_str();
    app.add_flag("--decay-embeddings", a->decay_embeddings, "Decay the embeddings too");
    app.add_option("--momentum", a->momentum, "SGD momentum")->capture_default_str();
    app.add_flag("--nesterov", a->nesterov, "SGD: Nesterov momentum");
    app.add_option("--clip", a->clip, "Global gradient-norm limit (0: off)")->capture_default_str();
    app.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
    app.add_option("--log-every", a->log_every, "Keep a progress line every N steps")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 30));
    app.add_option("-o,--out", a->out, "Write the trained model (GGUF, F32)");
    app.add_flag("--json", a->json,
                 "Last line of stdout: {tokens_per_s, mfu, final_loss, peak_rss_mib}");
    return [a] { return run_train(*a); };
}

}  // namespace

SYSLM_COMMAND(train, "train", "Train or fine-tune a model (FP32 for now)", setup);

}  // namespace syslm::cli
