// The decoder-only transformer forward pass for every supported architecture, over a batch of
// new tokens (prefill) or one token (decode), with a KV cache. The math reads top to bottom:
// embed -> per layer (norm, QKV, RoPE, attention over the cache, output, residual, norm, FFN or
// experts, residual) -> final norm -> logits. Speed lives in kernels/, not here.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "core/profiler.hpp"
#include "io/gguf.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/lora.hpp"
#include "kernels/cpu/matmul.hpp"
#include "model/hparams.hpp"
#include "model/kv_cache.hpp"
#include "model/lora.hpp"
#include "model/weights.hpp"

namespace syslm::model {

// A loaded model: the mapped file, its hyper-parameters and bound weights. Immutable; many
// contexts may share one model.
class Model {
public:
    explicit Model(const std::string& path);
    explicit Model(std::shared_ptr<const io::GGUFFile> file);
    // The file's model with some tensors replaced in memory (weights.hpp); the model keeps the
    // overrides' bytes alive.
    Model(std::shared_ptr<const io::GGUFFile> file, std::vector<TensorOverride> overrides);

    const HParams& hparams() const { return hp_; }
    // The local layers' window for contexts made from now on (HParams::set_window).
    void set_window(int w) { hp_.set_window(w); }
    // The top-p of a top-p routed model for contexts made from now on (HParams::set_expert_top_p).
    void set_expert_top_p(float p) { hp_.set_expert_top_p(p); }
    const Weights& weights() const { return w_; }
    const io::GGUFFile& file() const { return *file_; }
    std::shared_ptr<const io::GGUFFile> file_ptr() const { return file_; }
    // The RoPE of a context of n_ctx positions (LongRoPE's long factors beyond the original
    // context, HParams::rope_for), and the local layers' own (HParams::rope_local), if any.
    // nullptr without RoPE.
    const kernels::Rope* rope(int64_t n_ctx = 0) const {
        return rope_long_ && n_ctx > hp_.rope_orig_ctx ? rope_long_.get() : rope_.get();
    }
    const kernels::Rope* rope_local() const { return rope_local_.get(); }

private:
    std::shared_ptr<const io::GGUFFile> file_;
    HParams hp_;
    Weights w_;
    std::unique_ptr<kernels::Rope> rope_, rope_local_, rope_long_;
    std::vector<TensorOverride> overrides_;
};

// Where the rows of one forward call live: each row's position, where its rotated K and V go,
// and the attention of every row over what it may see. Context's rows are one sequence's new
// tokens over its contiguous KVCache; the serving engine's (infer/) are the tokens of many
// sequences over paged caches.
class KvRows {
public:
    // A row of dim floats as a cache of `type` keeps it: itself for F32, else rounded into dst.
    static const float* as_kept(DType type, const float* row, int64_t dim, float* dst);
    virtual ~KvRows() = default;
    virtual int64_t position(int64_t row) const = 0;
    virtual KvTypes kv_types() const = 0;
    virtual void store(int il, int64_t row, const float* k, const float* v) = 0;
    // out (rows x q_dim) = each row's attention over its sequence's visible keys and values.
    virtual void attend(int il, const kernels::AttentionShape& shape, const float* q, float* out,
                        backend::Backend& be) = 0;
    // Conv hybrids (HParams::conv_kernel): each position's attention-norm output of layer il is
    // kept for the convolution of the next positions. conv_lag gives that of position(row) - lag
    // (lag >= 1) as the cache keeps it (rounded to kv_types().conv(), widened into scratch): the
    // batch's own row of `a` (rows of dim floats) when that position is among this call's rows
    // of the same sequence, else the kept one, so that a position's value does not depend on
    // how the sequence was cut into calls; null before position 0. store_conv keeps row's.
    virtual const float* conv_lag(int il, int64_t row, int lag, const float* a, int64_t dim,
                                  float* scratch) = 0;
    virtual void store_conv(int il, int64_t row, const float* a) = 0;
    // A top-p routed MoE model's p for row's sequence (0: the model's; the serving engine's
    // requests each have their own under `--expert-top-p auto`).
    virtual float expert_top_p(int64_t /*row*/) const { return 0; }
};

// One sequence's new rows over its contiguous cache, from position n_past (Context's; a cloud's
// sessions batched together: model/context_batch).
class ContiguousRows final : public KvRows {
public:
    ContiguousRows(KVCache& cache, int64_t n_past, int64_t n_rows)
        : cache_(cache), n_past_(n_past), n_rows_(n_rows) {}
    int64_t position(int64_t row) const override;
    KvTypes kv_types() const override;
    void store(int il, int64_t row, const float* k, const float* v) override;
    void attend(int il, const kernels::AttentionShape& shape, const float* q, float* out,
                backend::Backend& be) override;
    const float* conv_lag(int il, int64_t row, int lag, const float* a, int64_t dim,
                          float* scratch) override;
    void store_conv(int il, int64_t row, const float* a) override;

private:
    KVCache& cache_;
    int64_t n_past_, n_rows_;
    const void *k_page_ = nullptr, *v_page_ = nullptr;  // a linear layer's cache as one page
};

// Sees the float input of every weight-matrix product of Forward::run (importance matrices,
// activation calibration). `tensor` is the GGUF name ("blk.3.ffn_down.weight"; the token
// embedding's name for a tied output), `expert` the expert's index in a 3-D expert tensor (-1
// otherwise); x holds `rows` rows of n_in floats. Called on the forward's thread, between kernels.
class ActivationObserver {
public:
    virtual ~ActivationObserver() = default;
    virtual void observe(const std::string& tensor, int expert, const float* x, int64_t rows,
                         int64_t n_in) = 0;
    // The residual stream after block `il` (rows x n_embd): distillation's hidden-state targets.
    virtual void observe_residual(int /*il*/, const float* /*x*/, int64_t /*rows*/,
                                  int64_t /*n_embd*/) {}
};

// The layer math over a batch of rows, with activation buffers allocated once for n_batch rows
// (so decoding allocates nothing per token) by the backend that runs it (backend/backend.hpp;
// the CPU backend with n_threads threads).
class Forward {
public:
    // n_ctx: the longest sequence it will see (chooses LongRoPE's factors; 0: the short ones).
    Forward(const Model& model, int n_batch, int n_threads, int64_t n_ctx = 0);

    // Runs rows.size() == tokens.size() rows through every layer; writes the logits of the rows
    // listed in logit_rows (ascending), one row of n_vocab each, to `logits`.
    void run(std::span<const int32_t> tokens, KvRows& rows, std::span<const int64_t> logit_rows,
             float* logits);
    // As run, from layer `first_layer` on: `residual` (rows x n_embd) is the residual stream
    // entering that layer (what observe_residual(first_layer - 1) saw; n_layer: only the output).
    // A model differing from another only in layers >= first_layer computes the same logits
    // from the other's residual, without running the layers they share.
    void run_from(int first_layer, std::span<const float> residual, KvRows& rows,
                  std::span<const int64_t> logit_rows, float* logits);
    int n_batch() const { return n_batch_; }
    backend::Backend& backend() { return backend_; }
    void set_observer(ActivationObserver* observer) { observer_ = observer; }
    // Layers to bypass (their residual contribution taken as zero): what the model would compute
    // with those layers removed (structured pruning's layer choice). Empty: none.
    void set_skipped_layers(std::vector<bool> skip) { skip_ = std::move(skip); }
    // Instead of logits, write each logit row's final-norm output (n_embd floats): the hidden
    // states that embeddings pool.
    void set_output_hidden(bool hidden) { output_hidden_ = hidden; }
    // Stop after layer end - 1 and write every row's residual stream (n_embd floats) instead of
    // logits: the edge's half of a model split at `end` (what run_from(end, ...) takes). -1: off.
    void set_end_layer(int end) { end_layer_ = end; }
    // The LoRA adapters of the next calls (model/lora.hpp), each with its scale and rows; the
    // adapters must outlive their use. Empty: the base model.
    void set_loras(std::vector<LoraUse> uses) { loras_ = std::move(uses); }
    const Model& model() const { return model_; }

private:
    void prepare_rows(KvRows& rows, int64_t T);
    void layers_and_output(int first_layer, int64_t T, std::span<const int64_t> logit_rows,
                           float* logits);
    void norm(const float* x, float* out, int64_t rows, const Vector& w, const Vector& b);
    struct QkvRows {  // in the forward's own buffers (writable: the Hadamard cache rotates v)
        float *q, *k, *v;
        int64_t q_stride, kv_stride;  // floats between consecutive tokens' rows
    };
    QkvRows project_qkv(int il, int64_t T, profiler::Steps& prof);
    void attention_block(int il, int64_t T);
    void conv_block(int il, int64_t T);  // HParams::conv_kernel: h_ = its causal convolution
    void ffn_block(int il, int64_t T);
    void moe_block(int il, int64_t T);
    // y (rows x n_out, after the base product) += each LoRA use's s B (A x) on its rows.
    struct LoraOutput {
        LoraTarget target;
        float* y;
    };
    void apply_lora(int il, std::initializer_list<LoraOutput> outputs, const float* x,
                    int64_t rows);
    // Reports a matrix input to the observer, if any: tensor "blk.<il>.<what>.weight".
    void observe(int il, const char* what, const float* x, int64_t rows, int64_t n_in,
                 int expert = -1);

    const Model& model_;
    const kernels::Rope* rope_;        // the global layers' (Model::rope(n_ctx)), or nullptr
    const kernels::Rope* rope_local_;  // Model::rope_local()
    const kernels::Rope* rope_of(int il) const {
        return rope_local_ && model_.hparams().window(il) > 0 ? rope_local_ : rope_;
    }
    backend::CpuBackend cpu_;
    backend::Backend& backend_ = cpu_;  // the layers see only the interface
    int n_batch_;
    KvRows* rows_ = nullptr;  // of the running call
    ActivationObserver* observer_ = nullptr;
    std::vector<bool> skip_;
    bool output_hidden_ = false;
    int end_layer_ = -1;
    std::vector<LoraUse> loras_;
    // The row kernel's segments (their rows in lora_rows_) and its scratch.
    std::vector<kernels::LoraSegment> lora_segments_;
    std::vector<int64_t> lora_rows_;
    std::vector<float> lora_dots_;
    // activations, sized for n_batch tokens
    backend::Buffer x_, h_, qkv_, k_, v_, attn_, ff_a_, ff_b_, ff_out_;
    backend::Buffer rope_angles_;        // per token of the running call: Rope::angles, all layers
    backend::Buffer rope_angles_local_;  // the same for Model::rope_local(), if any
    std::vector<int64_t> positions_;     // of the running call's rows
    std::vector<int64_t> row_ids_;       // token ids, or rows to gather, of one call
    std::vector<float> conv_lag_;        // conv_block: a kept row, widened
    kernels::SharedActivations shared_input_;  // normed input, converted once per partner type
    // MoE: the router's probabilities and each expert's gathered rows (n_batch rows at most);
    // routing state kept so that routing allocates nothing once warm. Routing reads the
    // probabilities on the host.
    backend::Buffer moe_probs_, moe_in_, moe_gate_, moe_up_, moe_out_;
    struct Routed {
        std::vector<int64_t> rows;
        std::vector<float> weights;
    };
    std::vector<Routed> moe_routed_;  // per expert: the rows routed to it and their weights
    std::vector<int64_t> moe_order_;
    std::vector<int32_t> moe_ids_;  // one token's chosen experts and their weights
    std::vector<float> moe_weights_;
};

// The mutable state of one sequence: its KV cache, position, and a Forward.
class Context {
    friend class ContextBatch;  // runs several contexts' rows in one forward

public:
    // kv_types: F16 (as llama.cpp; the default), F32 (exact; the reference tests use it), or
    // any of KvTypes' (quantized keys and values each). rings: layers
    // with a sliding window keep only their window's positions (KVCache); false keeps every
    // position in every layer (tests compare the two).
    Context(const Model& model, int n_ctx, int n_threads, int n_batch = 512, KvTypes kv_types = {},
            bool rings = true);

    // Appends tokens at positions n_past()..; returns logits, row-major: one row of n_vocab per
    // token when all_logits, otherwise only the last token's row.
    std::span<const float> forward(std::span<const int32_t> tokens, bool all_logits = false);
    // Forward::run_from for one batch of rows (at most n_batch) at positions n_past()..; the
    // logits of every row.
    std::span<const float> forward_from(int first_layer, std::span<const float> residual);
    // Appends tokens as forward does; returns every row's final-norm output (rows x n_embd),
    // the hidden states that embeddings pool.
    std::vector<float> hidden_states(std::span<const int32_t> tokens);
    // Appends tokens as forward does, through layers [0, end) only; returns every row's residual
    // stream entering layer `end` (rows x n_embd): an edge's half of a split model.
    std::span<const float> residual_until(int end, std::span<const int32_t> tokens);

    int n_past() const { return n_past_; }
    int n_ctx() const { return cache_.n_ctx(); }
    const KVCache& kv_cache() const { return cache_; }
    void reset() { n_past_ = 0; }
    // Forgets the positions from n on (speculative decoding's rejected drafts); later forwards
    // overwrite their cache entries.
    void truncate(int n);
    const Model& model() const { return model_; }
    backend::Backend& backend() { return forward_.backend(); }
    void set_observer(ActivationObserver* observer) { forward_.set_observer(observer); }
    void set_skipped_layers(std::vector<bool> skip) {
        forward_.set_skipped_layers(std::move(skip));
    }
    void set_loras(std::vector<LoraUse> uses) { forward_.set_loras(std::move(uses)); }

private:
    void run_batches(std::span<const int32_t> tokens, bool all_rows, float* out, size_t width);
    const Model& model_;
    KVCache cache_;
    Forward forward_;
    int n_past_ = 0;
    std::vector<float> logits_;
    std::vector<int64_t> logit_rows_;
};

}  // namespace syslm::model
