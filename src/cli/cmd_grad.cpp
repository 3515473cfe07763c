// syslm grad: the training loss of a model on a batch of token ids and the gradient of every
// parameter, written as a GGUF file with the model's tensor names (F32). Each sequence is T + 1
// ids: the first T are the input, the last T the targets (next-token prediction). Used to check
// the training math against PyTorch autograd (tests/reference/test_train_grads.py). With --lora,
// the gradients of an adapter's A and B on the frozen model (against PEFT: test_lora_train.py).
#include <cstdio>

#include "backend/cpu_backend.hpp"
#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "cli/token_ids.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "train/train_model.hpp"

namespace syslm::cli {
namespace {

struct GradArgs {
    std::string model, ids, out, lora;
    int batch = 1;
    int threads = 0;
    std::string recompute = "none";
    double moe_aux_coef = 0.01;
    double router_z_coef = 0.0;
    double expert_capacity = 0.0;
    std::string precision = "f32";
    float loss_scale = 1.0f;
};

int run_grad(const GradArgs& a) {
    const std::vector<int32_t> ids = parse_token_ids(a.ids, "--ids");
    SYSLM_CHECK(ids.size() % static_cast<size_t>(a.batch) == 0, "--ids: ", ids.size(),
                " ids do not split into ", a.batch, " sequences");
    const int T = static_cast<int>(ids.size()) / a.batch - 1;
    SYSLM_CHECK(T >= 1, "--ids: each sequence needs at least 2 ids (input and target)");
    std::vector<int32_t> tokens, targets;
    for (int b = 0; b < a.batch; ++b) {
        const auto* seq = ids.data() + static_cast<size_t>(b) * (T + 1);
        tokens.insert(tokens.end(), seq, seq + T);
        targets.insert(targets.end(), seq + 1, seq + T + 1);
    }
    const io::GGUFFile file(a.model);
    train::LoraSpec lora;
    lora.init = a.lora;
    train::TrainModel m(file, parallel::recompute_policy(a.recompute), nullptr, {},
                        a.lora.empty() ? nullptr : &lora);
    m.set_router_aux_coef(a.moe_aux_coef);
    m.set_router_z_coef(a.router_z_coef);
    m.set_expert_capacity(a.expert_capacity);
    m.set_precision(train::precision_mode(a.precision));
    backend::CpuBackend be(a.threads);
    const double loss = m.forward_backward(tokens, targets, a.batch, T, be, a.loss_scale);
    if (a.loss_scale != 1.0f) {  // written unscaled
        float* g = m.params().grads();
        for (size_t i = 0; i < m.params().size(); ++i) g[i] /= a.loss_scale;
    }
    auto meta = m.lora() ? train::lora_metadata(file, m.lora_alpha()) : file.metadata();
    meta.emplace_back("syslm.grad.loss", io::GGUFValue::f64(loss));
    m.params().write_gguf(a.out, meta, /*gradients=*/true);
    std::printf("loss %.9g\n", loss);
    std::fprintf(stderr, "wrote the gradients of %zu tensors to %s\n", m.params().params().size(),
                 a.out.c_str());
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<GradArgs>();
    app.add_option("-m,--model", a->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    app.add_option("--ids", a->ids, "Comma-separated token ids: batch sequences of T + 1 ids each")
        ->required();
    app.add_option("-b,--batch", a->batch, "Number of sequences in --ids")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("-o,--out", a->out, "Output GGUF file of F32 gradients")->required();
    app.add_option("--lora", a->lora,
                   "The gradients of this LoRA adapter's A and B (llama.cpp's adapter GGUF), the "
                   "model frozen")
        ->check(CLI::ExistingFile);
    app.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
    app.add_option("--precision", a->precision, "Linear layers' arithmetic: f32, bf16 or f16")
        ->capture_default_str();
    app.add_option("--loss-scale", a->loss_scale,
                   "Backpropagate loss x this (FP16 loss scaling); gradients are written unscaled")
        ->check(positive())
        ->capture_default_str();
    app.add_option("--moe-aux-coef", a->moe_aux_coef,
                   "MoE: weight of the load-balancing auxiliary loss in the loss")
        ->capture_default_str()
        ->check(non_negative());
    app.add_option("--router-z-loss", a->router_z_coef,
                   "MoE: weight of the router z-loss (mean squared log-sum-exp of the router "
                   "logits) in the loss")
        ->capture_default_str()
        ->check(non_negative());
    app.add_option("--expert-capacity", a->expert_capacity,
                   "MoE: capacity factor (choices past ceil(F x rows x k / experts) per expert "
                   "dropped); 0: no limit")
        ->capture_default_str()
        ->check(non_negative());
    app.add_option("--recompute", a->recompute, "Activation checkpointing: none, selective or full")
        ->capture_default_str()
        ->check(CLI::IsMember({"none", "selective", "full"}));
    return [a] { return run_grad(*a); };
}

}  // namespace

SYSLM_COMMAND(grad, "grad", "Training loss and parameter gradients on a batch of token ids", setup);

}  // namespace syslm::cli
