// The options of `syslm train` / `syslm distill` (cmd_train_options.cpp declares them) and the
// run they drive (cmd_train.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/structure_options.hpp"

namespace syslm::cli::train_cmd {

struct TrainArgs {
    // model
    std::string init, arch, tokenizer;
    // LoRA fine-tuning of --init's model: rank (0: full fine-tuning), alpha, targets (empty:
    // every projection the model has), an adapter to start from.
    int lora = 0;
    float lora_alpha = 8.0f;
    std::string lora_targets, lora_init;
    int layers = 4, heads = 8, kv_heads = 0, dim = 256, ffn = 0, ctx = 1024, vocab = 0;
    int experts = 0, experts_used = 2;
    float expert_top_p = 0.0f;  // top-p routing (from scratch; 0: top-k)
    int experts_used_min = 1;
    StructureOptions structure;  // local / linear attention, sharing, conv, Swish beta
    std::string window_range;    // "MIN:MAX": a window sampled per step for the local layers
    double moe_aux_coef = 0.01;
    double router_z_coef = 0.0;
    double expert_capacity = 0.0;  // capacity factor (0: no limit)
    std::string precision = "f32";
    float loss_scale = 65536.0f;
    int64_t token_budget = 0;
    std::string memory_limit;
    int64_t loss_scale_window = 2000;
    uint64_t seed = 1;
    // data
    std::string data, ids;
    std::string stratum_lr, curriculum;  // strata of a `data mix` directory (train_strata.hpp)
    bool synthetic = false;
    // run control
    int eval_every = 0, eval_batches = 20, patience = 0, checkpoint_every = 0;
    std::string checkpoint, resume, metrics;
    // run
    int batch = 4, seq = 64, accum = 1, threads = 0, log_every = 10;
    int64_t steps = 10;
    std::string optimizer = "adamw", recompute = "none";
    // Learning-rate schedule (cosine | linear | constant) and, with --pp, the pipeline schedule
    // (gpipe | 1f1b): the value sets are disjoint, so --schedule may name one or both.
    std::vector<std::string> schedule{"cosine"};
    float lr = 3e-4f, min_lr = 0.0f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    float weight_decay = 0.1f, momentum = 0.9f;
    bool nesterov = false, decay_embeddings = false;
    int64_t warmup = 0;
    double clip = 1.0;
    bool keep_zeros = false;
    std::string qat, teacher, teacher_cache;
    int offline_topk = 0;
    float distill_alpha = 0.5f, distill_temperature = 2.0f, distill_hidden = 0.0f;
    int distill_hidden_layers = 1;
    int dp = 0;  // data-parallel ranks; 0: the MPI world's size / tp
    int tp = 1, pp = 1;
    int micro_batches = 0;
    int zero = 0;
    std::string grad_compress = "none";
    double topk_ratio = 0.15;
    int64_t compress_warmup = 0;
    double dist_timeout = 60;
    std::string out;
    bool json = false;
    bool profile = false;
    std::string config;
    std::string plan;
};

// The run: model, data, the step loop, evaluation, checkpoints and the export. Returns the exit
// status.
int run_train(const TrainArgs& a);

}  // namespace syslm::cli::train_cmd
