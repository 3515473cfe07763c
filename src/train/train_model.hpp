// The training forward and backward pass of a decoder-only model over a batch of B sequences of T
// tokens, on FP32 parameters (params.hpp). The math is the inference forward's
// (model/transformer.cpp) with every intermediate the backward needs kept, written out layer by
// layer in the llm.c style (no autograd graph): the op set is closed and the activation memory is
// planned once for (B, T) — nothing is allocated inside a step once warm.
//
// Supported: llama / mistral (sliding window) / qwen2 (QKV biases, NEOX RoPE) / qwen3 (per-head
// q/k RMSNorm; not tensor-parallel) dense models and
// gpt2 (LayerNorm, fused QKV, learned positions, GELU, biases), bloom and mpt (ALiBi), gemma3
// (post-norms, GeGLU, scaled embeddings, a local RoPE), tied or separate output, and
// mixtral-style mixtures of experts (llama or qwen3moe with routed SwiGLU experts, softmax top-k
// routing and the Switch / HF load-balancing auxiliary loss; moe.cpp). Shared experts (qwen2moe)
// are refused.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/linear_backward.hpp"
#include "kernels/cpu/rope.hpp"
#include "model/hparams.hpp"
#include "parallel/communicator.hpp"
#include "parallel/recompute.hpp"
#include "train/arena.hpp"
#include "train/lora.hpp"
#include "train/params.hpp"

namespace syslm::train {

// Activation checkpointing (parallel/recompute.hpp): the planner predicts what it costs.
using parallel::Recompute;

// Routing scratch lives on the stack (no allocation inside a step): models with more experts per
// layer than this are refused.
constexpr int kMaxTrainedExperts = 512;

// Arithmetic of the linear layers (every matmul with a weight, incl. the output head). F32: f32
// throughout. BF16 / F16 mixed precision: both operands of those matmuls rounded to bf16 / fp16
// with f32 accumulation (as PyTorch's autocast), bf16 on AVX512_BF16's vdpbf16ps where the CPU
// has it, fp16 emulated (exact products through the f32 GEMMs: no speed-up on CPUs without FP16
// arithmetic); master weights, gradients, optimizer, norms, attention, softmax and loss stay
// f32. F16 needs loss scaling (Trainer), its range ends at 65504.
enum class Precision { F32, BF16, F16 };
Precision precision_mode(const std::string& name);  // "f32" | "bf16" | "f16"

// The blocks [first, end) a pipeline stage runs (end -1: through the last block).
struct PipelineStage {
    int first = 0, end = -1;
};

class TrainModel {
public:
    // Hyper-parameters from the file's metadata, parameters converted to f32. With a tensor-
    // parallel group of p ranks (Megatron-style; llama / mistral / qwen2 dense models), this rank
    // holds 1/p of the attention heads, KV heads and FFN channels: q, k, v, gate and up are cut by
    // output rows (column parallel), attn_output and ffn_down by input columns (row parallel),
    // whose partial outputs are summed over the group (and, backward, the input gradients of
    // the column-parallel matrices); norms, embeddings and the head are whole on every rank.
    //
    // A pipeline stage holds blocks [first, end) only; the first stage also the embeddings, the
    // last the output norm and head (tied embeddings across stages are refused). Only those
    // tensors are loaded.
    //
    // With `lora` (LoRA training), params() holds only the adapter's A and B (train/lora.hpp);
    // the base is frozen: its matrices and embeddings are used in place, in the file's types
    // (quantized: QLoRA), dequantized one matrix at a time for each product, and `file` must
    // outlive the model; its other tensors (norms, biases) are f32 copies. Not combined with
    // tensor or pipeline parallelism, experts or shared blocks.
    using Stage = PipelineStage;
    explicit TrainModel(const io::GGUFFile& file, Recompute recompute = Recompute::None,
                        parallel::Communicator* tensor_parallel = nullptr,
                        PipelineStage stage = PipelineStage{}, const LoraSpec* lora = nullptr);
    bool lora() const { return lora_file_ != nullptr; }
    float lora_alpha() const { return lora_alpha_; }
    parallel::Communicator* tensor_parallel() const { return tp_; }
    const Stage& stage() const { return stage_; }
    bool first_stage() const { return stage_.first == 0; }
    bool last_stage() const { return stage_.end == hp_.n_layer; }

    // One pipeline stage's share of a micro-batch (train/pipeline.cpp runs the schedule). The
    // first stage embeds `tokens`, the others start from x_in (B x T x n_embd); every stage but
    // the last writes its output to x_out; the last computes the loss against `targets`. With
    // `dy` (the gradient of x_out; ignored on the last stage, which starts from its loss) the
    // backward follows, adding into the gradients and writing dL/dx_in to dx (not on the first
    // stage). Returns the loss on the last stage, 0 elsewhere.
    struct StageIO {
        const float* x_in = nullptr;
        float* x_out = nullptr;
        bool backward = false;
        const float* dy = nullptr;
        float* dx = nullptr;
    };
    double stage_step(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B,
                      int T, backend::Backend& be, float loss_scale, const StageIO& io);

    const model::HParams& hparams() const { return hp_; }
    // Weight of the MoE load-balancing loss added to the training loss (HF's
    // router_aux_loss_coef); no effect on dense models.
    void set_router_aux_coef(double c) { aux_coef_ = c; }
    // Weight of the router z-loss (ST-MoE: the mean of lse(router logits)^2, keeping the logits
    // small) added to the training loss; 0: none.
    void set_router_z_coef(double c) { z_coef_ = c; }
    // The local layers' window for the next steps (a range of windows in training: Trainer).
    void set_window(int w) { hp_.set_window(w); }
    // Expert capacity factor (Switch Transformer): each expert takes at most
    // ceil(factor x rows x k / experts) of a forward's choices per layer (one micro-batch on one
    // rank), in row order; the rest are dropped (the row keeps its other experts, renormalised
    // where the model renormalises). 0: no limit. Throws Error for a dense model.
    void set_expert_capacity(double factor) {
        SYSLM_CHECK(std::isfinite(factor) && factor >= 0 && (factor == 0 || moe()),
                    "expert capacity ", factor,
                    " needs a mixture-of-experts model and a "
                    "finite factor >= 0");
        capacity_factor_ = factor;
    }
    double expert_capacity() const { return capacity_factor_; }
    // MoE: the experts the last training forward's rows took, on average over rows and layers
    // (top-k: k, less what capacity dropped).
    double experts_per_token() const { return experts_per_token_; }
    // MoE: the share of the last training forward's choices that capacity dropped.
    double dropped_share() const { return dropped_share_; }
    void set_precision(Precision p) { precision_ = p; }
    Precision precision() const { return precision_; }
    ParamStore& params() { return params_; }
    const ParamStore& params() const { return params_; }
    // Bytes of the activation arena a (B, T) step needs (measured, nothing allocated).
    size_t activation_bytes(int B, int T);

    // tokens and targets: B x T (row-major). Runs the forward pass, the mean cross-entropy over
    // the targets >= 0, and the backward pass, adding the gradients into params().grads().
    // Returns the loss (for MoE models: cross-entropy + aux coef x load-balancing loss). The
    // gradients are of loss_scale x the loss (FP16 loss scaling; a power of two keeps them
    // exactly the unscaled ones times it, short of overflow).
    // With `distill`, the loss is knowledge distillation's against the teacher's logits of the
    // same B x T positions (kernels::distill_loss_fused) instead of plain cross-entropy.
    struct Distill {
        const float* teacher_logits;  // B x T x n_vocab, or B x T x k with topk_ids
        float alpha;                  // weight of the soft (teacher) term
        float temperature;
        const int32_t* topk_ids = nullptr;  // offline: the teacher's top-k tokens per position
        int k = 0;
        // Hidden-state matching (match_hidden): the teacher's residual for each matched block,
        // hidden_layers().size() x (B x T) x its width, and the term's weight in the loss.
        const float* teacher_hidden = nullptr;
        float hidden_weight = 0.0f;
    };
    double forward_backward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                            int B, int T, backend::Backend& be, float loss_scale = 1.0f,
                            const Distill* distill = nullptr);

    // Hidden-state matching for distillation: the student's residual stream after each listed
    // block goes through a learned projection (student width -> teacher_embd, an auxiliary
    // parameter "distill.hidden.<il>.weight", trained with the rest, never exported) and its
    // relative squared error to the teacher's residual, |P h - t|^2 / |t|^2 averaged over rows
    // and blocks, is added to the loss with Distill::hidden_weight. Call before building the
    // optimizer: it grows params().
    void match_hidden(std::vector<int> layers, int teacher_embd, uint64_t seed);
    const std::vector<int>& hidden_layers() const { return hidden_layers_; }

    // Called during forward_backward as gradients become final: with il after block il's
    // backward (its parameters' gradients are complete), with -1 at the end (the rest: embeddings,
    // head, norms, auxiliary parameters). Data parallel starts reducing there. Empty: none.
    void set_gradient_hook(std::function<void(int)> hook) { grad_hook_ = std::move(hook); }

    // The forward pass only: the cross-entropy (targets as above), nothing kept for a backward.
    double loss(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B, int T,
                backend::Backend& be);

private:
    struct Tensor {  // one parameter: value and gradient, both nullptr when absent
        float* w = nullptr;
        float* g = nullptr;
        // LoRA training: a frozen base matrix in its file's type (w and g nullptr), and its
        // adapter pair in lora_ (-1: none).
        const uint8_t* frozen = nullptr;
        DType frozen_type = DType::F32;
        int lora = -1;
        bool present() const { return w || frozen; }
    };
    // A LoRA pair on a base matrix (n_out x n_in): y += scale B (A x), A r x n_in, B n_out x r.
    struct LoraPair {
        Tensor a, b;
        int64_t r = 0;
        float scale = 1;
    };
    struct Layer {
        Tensor attn_norm, attn_norm_b, wq, wk, wv, wqkv, bq, bk, bv, bqkv, q_norm, k_norm, wo, bo;
        Tensor ffn_norm, ffn_norm_b, ffn_gate, ffn_up, ffn_down, ffn_up_b, ffn_down_b;
        Tensor ffn_beta;  // HParams::swish_beta: the gate's Swish beta per channel
        Tensor post_attn_norm, post_ffn_norm;  // ArchSpec::post_norms (gemma)
        Tensor attn_conv;                      // HParams::conv_kernel: k rows of n_embd taps
        Tensor router, gate_exps, up_exps, down_exps;  // MoE: expert e's matrix at e x its size
    };
    struct Saved {  // what a layer's backward needs, for B*T rows
        // g, u, s: B*T x n_ff (dense), or B*T*K x n_ff_exp (MoE, rows in slot order).
        Buf<float> x_in, a, q, k, v, o, lse, x_mid, b, g, u, s;
        Buf<float> q_raw, k_raw;       // qk_norm: the projections before their norm
        Buf<float> attn_out, ffn_out;  // post_norms: the blocks' outputs before their norms
        Buf<float> conv;               // conv hybrids: the attention input (conv of a)
        // MoE routing: router probabilities (rows x experts); each (row, k) choice's slot, where
        // slots are grouped by expert (expert e owns slots expert_begin[e] ..
        // expert_begin[e+1]); each slot's row, weight and expert output (slots x n_embd).
        Buf<float> router_p, slot_w, eo, router_lse;
        Buf<int32_t> route_slot, slot_row;
        Buf<int64_t> expert_begin;
        int64_t expert_of(int64_t slot) const {
            return std::upper_bound(expert_begin.begin(), expert_begin.end(), slot) -
                   expert_begin.begin() - 1;
        }
    };

    Tensor bind(const std::string& name, std::vector<int64_t> ne, bool required = true);
    void bind_all();  // every Tensor below from params_'s current arrays
    void set_up_lora(const io::GGUFFile& file, const LoraSpec& spec,
                     parallel::Communicator* tensor_parallel);
    void bind_ffn(const std::string& prefix, Layer& l);
    static std::string hidden_name(int il);
    int hidden_slot(int il) const {  // index into hidden_layers_, or -1
        const auto it = std::find(hidden_layers_.begin(), hidden_layers_.end(), il);
        return it == hidden_layers_.end() ? -1 : static_cast<int>(it - hidden_layers_.begin());
    }
    double hidden_loss(size_t m, const float* teacher, float weight, int64_t R, float loss_scale,
                       backend::Backend& be);
    Saved& saved(int il) {
        return saved_[recompute_ == Recompute::Full ? 0 : static_cast<size_t>(il)];
    }
    // Where a layer's norm outputs and activation output live: its own Saved, or (Selective)
    // one buffer that every layer overwrites and the backward refills.
    float* norm1_out(Saved& S) {
        return recompute_ == Recompute::Selective ? sel_a_.data() : S.a.data();
    }
    float* norm2_out(Saved& S) {
        return recompute_ == Recompute::Selective ? sel_b_.data() : S.b.data();
    }
    float* act_out(Saved& S) {
        return recompute_ == Recompute::Selective ? sel_s_.data() : S.s.data();
    }
    // act_out(S) from S.g / S.u; with beta (n_ff floats) the Swish-beta GLU.
    void activation(Saved& S, int64_t n, backend::Backend& be, const float* beta = nullptr);
    void plan(int B, int T);
    void layout(int B, int T, ArenaLayout& a);  // every activation buffer, in one fixed order
    double run(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B, int T,
               backend::Backend& be, bool backward, float loss_scale,
               const Distill* distill = nullptr, const StageIO* io = nullptr);
    void embed(std::span<const int32_t> tokens, int T, const StageIO* io, backend::Backend& be);
    void embed_backward(int64_t R, int T, const StageIO* io, backend::Backend& be);
    double head_loss(std::span<const int32_t> targets, int64_t R, float loss_scale,
                     const Distill* distill, backend::Backend& be);
    void head_backward(int64_t R, backend::Backend& be);
    void stage_backward(int B, int T, bool hidden, const StageIO* io, backend::Backend& be);
    void layer_forward(int il, int B, int T, backend::Backend& be);
    void layer_backward(int il, int B, int T, backend::Backend& be);
    void dense_ffn_backward(Layer& l, Saved& S, const float* b, int64_t R, backend::Backend& be);
    bool moe() const { return hp_.n_expert > 0; }
    // MoE FFN (moe.cpp): routes the rows of `b` (the FFN norm's output), runs the experts on
    // their rows and writes the weighted sum to tmp_; the backward reads dL/dout from dx_ and
    // writes dL/db to d_b_.
    void moe_forward(int il, Saved& S, const float* b, int64_t R, backend::Backend& be);
    backend::Backend::MoeSlots slots(const Saved& S, int64_t R) const;
    // Drops the choices past each expert's capacity (capacity_factor_); returns how many.
    int64_t apply_capacity(Saved& S, int64_t R) const;
    // experts_per_token_ and dropped_share_ from this forward's counts.
    void record_routing();
    double experts_per_token_ = 0, dropped_share_ = 0;
    std::vector<int64_t> slot_rows_;  // the MoE slots' rows, as gather_rows takes them
    void moe_backward(int il, Saved& S, const float* b, int64_t R, backend::Backend& be);
    // From the forward's counts; also sets moe_aux_grad_ (of grad_scale x the weighted loss).
    double moe_aux_loss(float grad_scale);
    double moe_z_loss() const;  // of this step's forward (moe_z_sum_)
    kernels::Rounding rounding() const {
        return precision_ == Precision::BF16 ? kernels::Rounding::BF16 : kernels::Rounding::F16;
    }
    void norm_forward(const float* x, float* out, const Tensor& w, const Tensor& b, int64_t rows,
                      backend::Backend& be) const;
    void norm_backward(const float* x, const Tensor& w, const Tensor& b, const float* dy, float* dx,
                       int64_t rows, backend::Backend& be) const;
    // y = x W^T (+ bias) for rows of x (plus its LoRA pair's term), and the matching backward
    // (dx overwritten or added; a frozen matrix gets no gradient, its pair does).
    void linear(const Tensor& w, const Tensor& b, const float* x, int64_t rows, int64_t n_in,
                int64_t n_out, float* y, backend::Backend& be);
    void linear_backward(const Tensor& w, const Tensor& b, const float* x, const float* dy,
                         int64_t rows, int64_t n_in, int64_t n_out, float* dx, bool add_dx,
                         backend::Backend& be);
    // The f32 values of w (n_out rows of n_in): its own, or a frozen matrix dequantized into
    // dequant_.
    const float* dense(const Tensor& w, int64_t n_in, int64_t n_out, backend::Backend& be);
    void lora_forward(int pair, const float* x, int64_t rows, int64_t n_in, int64_t n_out, float* y,
                      backend::Backend& be);
    void lora_backward(int pair, const float* x, const float* dy, int64_t rows, int64_t n_in,
                       int64_t n_out, float* dx, backend::Backend& be);
    const kernels::Rounding* rounded(kernels::Rounding& r) const {
        r = rounding();
        return precision_ != Precision::F32 ? &r : nullptr;
    }

    model::HParams hp_;
    ParamStore params_;
    // LoRA training: the base file (its matrices used in place), the frozen f32 tensors, the
    // adapter's alpha and pairs; per pair its A x of the last forward (rows x r, for the
    // backward); scratch for the scaled A x, its gradient and the pair's output; the dequantized
    // matrix of the current product.
    const io::GGUFFile* lora_file_ = nullptr;
    ParamStore base_;
    float lora_alpha_ = 0;
    std::vector<LoraPair> lora_;
    std::vector<Buf<float>> lora_u_;
    Buf<float> lora_us_, lora_gu_, lora_y_;
    std::vector<float> dequant_;
    std::vector<int64_t> all_rows_;  // 0, 1, 2, ...: the rows dequantize() takes
    // HParams::rope, rope_long (LongRoPE's long factors) and rope_local; the global layers
    // rotate with rope_long_ when the planned T exceeds rope_orig_ctx (plan() picks active_rope_).
    std::unique_ptr<kernels::Rope> rope_, rope_long_, rope_local_;
    const kernels::Rope* active_rope_ = nullptr;
    std::vector<float> rope_angles_;  // Rope::angles of positions 0..T-1, made by plan()
    std::vector<float> rope_angles_local_;
    // Layer il's RoPE and its angles (the local one for windowed layers, if the model has one).
    const kernels::Rope* rope(int il) const {
        return rope_local_ && hp_.window(il) > 0 ? rope_local_.get() : active_rope_;
    }
    const float* rope_angles(int il) const {
        return rope_local_ && hp_.window(il) > 0 ? rope_angles_local_.data() : rope_angles_.data();
    }
    void scale_embeddings(float* x, int64_t n, backend::Backend& be) const;
    Tensor token_embd_, position_embd_, output_norm_, output_norm_b_, output_;
    Tensor embd_norm_, embd_norm_b_;  // bloom's norm of the embedding rows
    std::vector<Layer> layers_;

    // Activations, planned for (B, T): the residual stream, per-layer saved tensors, the final
    // norm's input/output, logits (overwritten by their gradient), and backward scratch.
    int planned_B_ = 0, planned_T_ = 0;
    Recompute recompute_;
    // All of them are views into one arena block (arena.hpp), placed by layout().
    ArenaBlock arena_;
    size_t arena_bytes_ = 0;
    std::vector<Saved> saved_;          // per layer, or one reused by every layer (Full)
    std::vector<Buf<float>> inputs_;    // Full: each layer's input
    Buf<float> sel_a_, sel_b_, sel_s_;  // Selective: the recomputed intermediates
    Buf<float> x_, x_final_, xf_, logits_;
    Buf<float> x_embed_;               // the embedding rows before embd_norm_
    Buf<float> capped_;                // final_softcap: the soft-capped logits, for the backward
    std::vector<float> qk_norm_grad_;  // a layer's q and k norm gradients before the TP sum
    Buf<float> dx_, d_mid_, d_a_, d_q_, d_k_, d_v_, d_o_, d_b_, d_g_, d_u_, d_s_, tmp_;
    Buf<int32_t> tokens_;

    // MoE: rows gathered per expert, their output gradients (then input gradients), router
    // logit gradients, per-slot routing-weight gradients; per layer, how many rows chose each
    // expert and the sum of its router probability (the load-balancing loss's two factors).
    int64_t ffn_width_ = 0;  // floats of g / u / s per row: n_ff, or K x n_ff_exp for MoE
    double aux_coef_ = 0.01;
    double capacity_factor_ = 0.0;
    double z_coef_ = 0.0, moe_z_sum_ = 0.0;  // the z-loss's weight, this step's sum of lse^2
    float z_grad_scale_ = 1.0f;              // the loss scale its gradient carries
    Precision precision_ = Precision::F32;
    Buf<float> moe_in_, moe_grad_, moe_dz_, moe_slot_dw_, moe_aux_grad_;
    Buf<int64_t> moe_count_;
    Buf<int64_t> moe_dropped_;  // per layer: choices capacity dropped in the last forward
    Buf<double> moe_psum_;

    // Hidden-state matching: matched blocks, the teacher's width, the projections; the projected
    // residual (scratch) and each matched block's residual gradient, kept from forward to
    // backward.
    std::vector<int> hidden_layers_;
    int hidden_embd_ = 0;
    std::vector<Tensor> hidden_proj_;
    std::vector<float> hidden_y_, d_hidden_;
    std::function<void(int)> grad_hook_;
    parallel::Communicator* tp_ = nullptr;  // tensor-parallel group (nullptr: whole model)
    Stage stage_;
    // Vocabulary parallel (tensor parallelism when the ranks divide the vocabulary): this rank's
    // tokens [vocab_begin_, vocab_begin_ + vocab_local_) of the embedding and the head.
    bool vocab_parallel_ = false;
    int64_t vocab_begin_ = 0, vocab_local_ = 0;
    std::vector<float> xent_max_;
    std::vector<double> xent_sums_;
    std::vector<int64_t> row_ids_;  // embedding rows of a call (tokens, positions)
    std::vector<float> ones_;       // unit weights for the position gradient's scatter
    double vocab_parallel_xent(const int32_t* targets, int64_t R, float scale,
                               backend::Backend& be);
    void tp_sum(float* x, int64_t n) {  // a row-parallel output or column-parallel input grad
        if (tp_) tp_->all_reduce_sum(x, static_cast<size_t>(n));
    }
};

}  // namespace syslm::train
