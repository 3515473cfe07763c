// The command lines of `syslm train` and `syslm distill`: every option into TrainArgs, then a
// TOML config file and a tuned plan (`--plan`) applied under the flags, then the run.
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "cli/config_file.hpp"
#include "cli/option_checks.hpp"
#include "cli/plan_settings.hpp"
#include "cli/train_args.hpp"
#include "core/error.hpp"
#include "tune/plan.hpp"

namespace syslm::cli {
namespace train_cmd {
namespace {

// `--plan`: the plan's training settings (from `syslm tune train`), exactly. The plan decided the
// micro-batch for its memory limit, so --token-budget and --memory-limit do not combine with it.
void apply_plan(const CLI::App& app, TrainArgs& a) {
    const tune::Plan plan = tune::load_plan(a.plan);
    usage_check(plan.train.has_value(), a.plan, " has no training settings (tune it with ",
                "`syslm tune train`)");
    usage_check(a.token_budget == 0 && a.memory_limit.empty(), "--plan sets the micro-batch and ",
                "accumulation: --token-budget and --memory-limit do not combine with it");
    const tune::TrainSettings& t = *plan.train;
    take_from_plan(app.get_option("--threads"), a.threads, plan.threads, "runtime.threads");
    take_from_plan(app.get_option("--batch"), a.batch, t.micro_batch, "train.micro_batch");
    take_from_plan(app.get_option("--accum"), a.accum, t.accum, "train.accum");
    if (a.micro_batches > 0)
        take_from_plan(app.get_option("--micro-batches"), a.micro_batches, t.accum, "train.accum");
    take_from_plan(app.get_option("--recompute"), a.recompute, t.recompute, "train.recompute");
    take_from_plan(app.get_option("--precision"), a.precision, t.precision, "train.precision");
}

// Distillation from a teacher: online, or offline from a top-k cache; hidden-state matching.
void add_distill_options(CLI::App& app, TrainArgs& a, bool distill) {
    auto* teacher = app.add_option(
        "--teacher", a.teacher,
        "Knowledge distillation from this GGUF model (same vocabulary; any type): the loss is "
        "alpha * tau^2 * KL(teacher || student) at temperature tau + (1 - alpha) * cross-entropy");
    teacher->check(CLI::ExistingFile);
    if (distill) teacher->required();
    app.add_option("--offline-topk", a.offline_topk,
                   "Offline distillation: the teacher's top-K logits of every training window are "
                   "computed once into a cache (--teacher-cache, default <data>/teacher-topK-seqT"
                   ".cache) and reused every epoch; the teacher is not run during training")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--teacher-cache", a.teacher_cache, "Where the offline top-k cache lives");
    app.add_option("--distill-alpha", a.distill_alpha, "Weight of the teacher's soft targets")
        ->capture_default_str()
        ->check(unit_interval());
    app.add_option("--distill-temperature", a.distill_temperature, "Softmax temperature tau")
        ->capture_default_str()
        ->check(positive());
    auto* hidden =
        app.add_option(
               "--distill-hidden", a.distill_hidden,
               "Hidden-state matching (online teacher): weight of the relative squared error "
               "between the student's residual stream, through a learned projection to the "
               "teacher's width, and the teacher's, added to the loss (0: off)")
            ->capture_default_str()
            ->check(non_negative());
    app.add_option("--distill-hidden-layers", a.distill_hidden_layers,
                   "Hidden-state matching: how many student blocks are matched, spread evenly and "
                   "ending with the last, each with the teacher's block at the same relative depth")
        ->capture_default_str()
        ->check(CLI::PositiveNumber)
        ->needs(hidden);
}

// Data, tensor and pipeline parallelism under mpirun; ZeRO; gradient compression.
void add_parallel_options(CLI::App& app, TrainArgs& a) {
    app.add_option("--dp", a.dp,
                   "Data-parallel ranks: run under `mpirun -np N`; each rank trains on --batch "
                   "sequences of a global batch of N x --batch (default: every started rank)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--tp", a.tp,
                   "Tensor-parallel ranks per replica (Megatron: heads and FFN channels split, "
                   "neighbouring ranks); the world is --dp x --tp ranks")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--pp", a.pp,
                   "Pipeline stages: the blocks split in order over --pp ranks, --micro-batches "
                   "micro-batches per step scheduled by --schedule gpipe | 1f1b")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--zero", a.zero,
                   "ZeRO stage over the data-parallel ranks: 1 shards the optimizer state, 2 also "
                   "reduce-scatters the gradients (checkpoints are then written one shard per rank "
                   "and load at any world size)")
        ->capture_default_str()
        ->check(CLI::Range(0, 2));
    auto* compress = app.add_option(
        "--grad-compress", a.grad_compress,
        "Data parallel: compress the gradients sent to each block's owner and the owner's "
        "weight updates sent back, both with error feedback (the optimizer state is sharded as "
        "ZeRO's): none | int8 (4x fewer bytes) | topk (--topk-ratio of the values, bf16) | sign "
        "(1 bit per value and a scale per 64, 1-bit Adam: 21x)");
    compress->capture_default_str()->check(CLI::IsMember({"none", "int8", "topk", "sign", "1bit"}));
    app.add_option("--topk-ratio", a.topk_ratio,
                   "--grad-compress topk: the share of each block's values sent (15%: 9x fewer "
                   "bytes)")
        ->capture_default_str()
        ->check(finite_in(0, 1, true))
        ->needs(compress);
    app.add_option("--grad-compress-warmup", a.compress_warmup,
                   "Steps reduced exactly before compression starts (as 1-bit Adam's warm-up)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber)
        ->needs(compress);
    app.add_option("--dist-timeout", a.dist_timeout,
                   "Data parallel: seconds a collective may wait before the job is aborted with a "
                   "message (a rank died or hangs)")
        ->capture_default_str()
        ->check(positive());
}

// The model trained: fine-tuned, from scratch (its shape), or a checkpoint resumed.
// Mixture of experts: routing (from scratch) and its training losses and capacity.
void add_moe_options(CLI::App& app, TrainArgs& a) {
    app.add_option("--experts", a.experts, "From scratch: routed experts per layer (0: dense)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 16));
    app.add_option("--experts-used", a.experts_used, "From scratch: experts per token (top-k)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--expert-top-p", a.expert_top_p,
                   "From scratch: top-p routing: experts in order of probability until they sum "
                   "to P, between --experts-used-min and --experts-used (0: top-k)")
        ->check(CLI::Range(0.0f, 1.0f));
    app.add_option("--experts-used-min", a.experts_used_min,
                   "From scratch: the fewest experts top-p routing takes")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--moe-aux-coef", a.moe_aux_coef,
                   "MoE: weight of the load-balancing auxiliary loss")
        ->capture_default_str()
        ->check(non_negative());
    app.add_option("--expert-capacity", a.expert_capacity,
                   "MoE: capacity factor; each expert takes at most ceil(F x rows x k / experts) "
                   "of a micro-batch's choices per layer, later rows' choices past it are "
                   "dropped (Switch Transformer; evaluation routes without it); 0: no limit")
        ->capture_default_str()
        ->check(non_negative());
    app.add_option("--router-z-loss", a.router_z_coef,
                   "MoE: weight of the router z-loss (ST-MoE: mean squared log-sum-exp of the "
                   "router logits); 0: none")
        ->capture_default_str()
        ->check(non_negative());
}

void add_model_options(CLI::App& app, TrainArgs& a) {
    app.add_option("--init", a.init, "Fine-tune this GGUF model")->check(CLI::ExistingFile);
    app.add_option("--arch", a.arch,
                   "Train from scratch: llama | qwen2 | qwen3 | qwen3moe (with --experts) | gpt2 | "
                   "bloom | mpt (ALiBi) | phi3 | gemma2 | gemma3")
        ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "qwen3moe", "gpt2", "bloom", "mpt",
                               "phi3", "gemma2", "gemma3"}));
    app.add_option("--layers", a.layers, "From scratch: layers")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--heads", a.heads, "From scratch: attention heads")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--kv-heads", a.kv_heads, "From scratch: KV heads (0: as --heads)")
        ->check(CLI::Range(0, 1 << 16));
    app.add_option("--dim", a.dim, "From scratch: embedding width")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--ffn", a.ffn, "From scratch: FFN width (0: the architecture's default)")
        ->check(CLI::Range(0, 1 << 24));
    add_moe_options(app, a);
    add_structure_options(app, a.structure, "From scratch: ");
    app.add_option("--window-range", a.window_range,
                   "MIN:MAX: each step trains the local layers with a window drawn "
                   "log-uniformly from [MIN, MAX], so that the model accepts any of them "
                   "(generate/perplexity/serve --window N); evaluation and the file keep the "
                   "model's own window");
    app.add_option("--ctx", a.ctx, "From scratch: context length")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 24));
    app.add_option("--tokenizer", a.tokenizer, "From scratch: GGUF whose tokenizer to use")
        ->check(CLI::ExistingFile);
    app.add_option("--vocab", a.vocab,
                   "Vocabulary size: checked against the tokenizer; from scratch with "
                   "--synthetic-data it is enough without --tokenizer")
        ->check(CLI::Range(1, 1 << 30));
    app.add_option("--seed", a.seed,
                   "Seed of the initialisation and of the data order (shard sampling or "
                   "synthetic tokens)")
        ->capture_default_str();
    app.add_option("--resume", a.resume,
                   "Continue a checkpoint directory (same flags otherwise); one left half-swapped "
                   "by a killed run is recovered first");
    app.add_option("--lora", a.lora,
                   "LoRA: train only rank-R adapters on --init's model, whose weights stay frozen "
                   "in their own types (a Q4/Q8 base: QLoRA); --out and checkpoints hold "
                   "llama.cpp's adapter GGUF (generate/serve --lora)")
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--lora-alpha", a.lora_alpha,
                   "LoRA: the update is scaled by alpha / R (PEFT's lora_alpha)")
        ->capture_default_str()
        ->check(positive());
    app.add_option("--lora-targets", a.lora_targets,
                   "LoRA: the matrices adapted, of q, k, v, qkv (fused), o, gate, up, down "
                   "(default: all the model has)");
    app.add_option("--lora-init", a.lora_init,
                   "LoRA: start from this adapter GGUF (its rank, alpha and targets)")
        ->check(CLI::ExistingFile);
}

// The data and how a step's batch is made of it.
void add_batch_options(CLI::App& app, TrainArgs& a) {
    app.add_option("--data", a.data, "Data: a `syslm data prepare` directory (train split)")
        ->check(CLI::ExistingDirectory);
    app.add_option("--stratum-lr", a.stratum_lr,
                   "Learning-rate scale per stratum of a `data mix` --data directory: "
                   "NAME=SCALE,... (NAME a stratum, a level such as hard, or a source); each "
                   "step trains on one stratum");
    app.add_option("--curriculum", a.curriculum,
                   "easy-to-hard: steps in phases, phase p drawing the strata of difficulty "
                   "levels <= p (a `data mix --strata difficulty:K` directory)")
        ->check(CLI::IsMember({"easy-to-hard"}));
    app.add_option("--ids", a.ids, "Data: one fixed batch, --batch sequences of --seq + 1 ids");
    app.add_flag("--synthetic-data", a.synthetic, "Data: uniformly random tokens (benchmarks)");
    app.add_option("-b,--batch", a.batch, "Sequences per micro-batch")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--seq", a.seq, "Tokens per sequence")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--steps", a.steps, "Optimizer steps")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
    app.add_option("--accum", a.accum, "Micro-batches per step (gradient accumulation)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--micro-batches", a.micro_batches,
                   "Micro-batches per step (as --accum); with --pp they fill the pipeline")
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--token-budget", a.token_budget,
                   "Tokens per optimizer step (sequences = budget / --seq; replaces --batch x "
                   "--accum): split into the largest micro-batch that fits --memory-limit")
        ->check(CLI::PositiveNumber);
    app.add_option("--memory-limit", a.memory_limit,
                   "Largest estimated process memory (e.g. 2GiB): the micro-batch shrinks to fit "
                   "and the rest of the step is accumulated");
}

// The optimizer, its schedule, and the step's arithmetic (precision, recompute, clipping).
void add_step_options(CLI::App& app, TrainArgs& a) {
    app.add_option("--optimizer", a.optimizer, "adamw | lion | sgd")->capture_default_str();
    app.add_option("--lr", a.lr, "Peak learning rate")
        ->capture_default_str()
        ->check(non_negative());
    app.add_option("--min-lr", a.min_lr, "Learning rate at the end of the decay")
        ->capture_default_str()
        ->check(non_negative());
    app.add_option("--warmup", a.warmup, "Linear warm-up steps")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
    app.add_option(
           "--schedule", a.schedule,
           "Learning-rate schedule: cosine | linear | constant; with --pp also the pipeline "
           "schedule: gpipe | 1f1b (default 1f1b), e.g. --schedule 1f1b")
        ->capture_default_str()
        ->check(CLI::IsMember({"cosine", "linear", "constant", "gpipe", "1f1b"}));
    app.add_option("--beta1", a.beta1, "AdamW / Lion beta1")
        ->capture_default_str()
        ->check(unit_interval_open_top());
    app.add_option("--beta2", a.beta2, "AdamW / Lion beta2")
        ->capture_default_str()
        ->check(unit_interval_open_top());
    app.add_option("--eps", a.eps, "AdamW epsilon")->capture_default_str()->check(positive());
    app.add_option("--weight-decay", a.weight_decay,
                   "Decay of the matrices (not norms, biases, "
                   "embeddings)")
        ->capture_default_str()
        ->check(non_negative());
    app.add_flag("--decay-embeddings", a.decay_embeddings, "Decay the embeddings too");
    app.add_option("--momentum", a.momentum, "SGD momentum")
        ->capture_default_str()
        ->check(unit_interval_open_top());
    app.add_flag("--nesterov", a.nesterov, "SGD: Nesterov momentum");
    app.add_option("--precision", a.precision,
                   "Linear layers' arithmetic: f32, or bf16 / f16 (mixed precision: rounded "
                   "operands, f32 accumulation and master weights; f16 with dynamic loss "
                   "scaling), or auto: bf16 where this CPU's bf16 training GEMM measures over "
                   "1.25x its f32 one, else f32")
        ->capture_default_str();
    app.add_option("--loss-scale", a.loss_scale, "f16: initial loss scale")
        ->check(positive())
        ->capture_default_str();
    app.add_option("--loss-scale-window", a.loss_scale_window,
                   "f16: finite steps in a row that double the loss scale")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    app.add_option("--recompute", a.recompute,
                   "Activation checkpointing: none; selective (recompute norm and activation "
                   "outputs); full (keep layer inputs, recompute the rest in the backward pass)")
        ->capture_default_str()
        ->check(CLI::IsMember({"none", "selective", "full"}));
    app.add_option("--clip", a.clip, "Global gradient-norm limit (0: off)")
        ->capture_default_str()
        ->check(non_negative());
}

// QAT and pruning recovery; threads, logging, evaluation, checkpoints and outputs.
void add_run_options(CLI::App& app, TrainArgs& a) {
    app.add_option("--qat", a.qat,
                   "Quantization-aware training for this type (Q4_0, Q8_0, Q4_K_M, ...): "
                   "matrices are fake-quantized in every step (straight-through gradients) and "
                   "--out receives the quantized GGUF (the float master as <out>-f32.gguf)");
    app.add_flag("--keep-zeros", a.keep_zeros,
                 "Weights of the blocks' matrices that are zero at the start stay zero "
                 "(fine-tuning a model from `syslm prune` keeps its sparsity)");
    app.add_option("-t,--threads", a.threads, "Threads (default: all cores)")
        ->check(CLI::Range(0, 4096));
    app.add_option("--log-every", a.log_every, "Keep a progress line every N steps")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 30));
    app.add_option("--eval-every", a.eval_every, "Evaluate on the val split every N steps (0: off)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--eval-batches", a.eval_batches, "Val batches per evaluation (0: all)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("--patience", a.patience,
                   "Stop after N evaluations without a better val loss (0: never)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--checkpoint", a.checkpoint,
                   "Checkpoint directory (written atomically; also on Ctrl-C)");
    app.add_option("--checkpoint-every", a.checkpoint_every,
                   "Checkpoint every N steps (0: only "
                   "on Ctrl-C)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--metrics", a.metrics, "Append one JSON line per step / evaluation");
    app.add_option("-o,--out", a.out, "Write the trained model (GGUF, F32)");
    app.add_flag("--profile", a.profile,
                 "Per-op time table of the training steps (forward, backward, loss)");
    app.add_flag("--json", a.json,
                 "Last line of stdout: {tokens_per_s, mfu, first_loss, final_loss, peak_rss_mib, "
                 "micro_batch, accum, recompute, precision, threads, n_vocab, tokens_per_step}");
    app.add_option("--plan", a.plan,
                   "A plan from `syslm tune train` (its plan.json): micro-batch, accumulation, "
                   "recompute, precision and threads, exactly; an option also given must agree")
        ->check(CLI::ExistingFile);
}

std::function<int()> setup_command(CLI::App& app, bool distill) {
    auto a = std::make_shared<TrainArgs>();
    app.add_option(distill ? "--student" : "--config", a->config,
                   std::string(distill ? "The student: a " : "") +
                       "TOML file of options: keys are the long option names (`layers = 4`, "
                       "`data = \"runs/x/data\"`); command-line flags win")
        ->check(CLI::ExistingFile);
    add_distill_options(app, *a, distill);
    add_parallel_options(app, *a);
    add_model_options(app, *a);
    add_batch_options(app, *a);
    add_step_options(app, *a);
    add_run_options(app, *a);
    return [a, &app] {
        if (!a->config.empty()) apply_config_file(app, a->config);
        if (!a->plan.empty()) apply_plan(app, *a);
        return run_train(*a);
    };
}

std::function<int()> setup_train(CLI::App& app) {
    return setup_command(app, false);
}

std::function<int()> setup_distill(CLI::App& app) {
    return setup_command(app, true);
}

}  // namespace
}  // namespace train_cmd

SYSLM_COMMAND(train, "train", "Train, fine-tune or resume a model", train_cmd::setup_train);
SYSLM_COMMAND(distill, "distill",
              "Train a student model (--student config) against a teacher's soft targets",
              train_cmd::setup_distill);

}  // namespace syslm::cli
