// The decoder-only transformer forward pass for every supported architecture, over a batch of
// new tokens (prefill) or one token (decode), with a KV cache. The math reads top to bottom:
// embed -> per layer (norm, QKV, RoPE, attention over the cache, output, residual, norm, FFN or
// experts, residual) -> final norm -> logits. Speed lives in kernels/, not here.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "io/gguf.hpp"
#include "kernels/cpu/matmul.hpp"
#include "model/hparams.hpp"
#include "model/kv_cache.hpp"
#include "model/weights.hpp"

namespace syslm::model {

// A loaded model: the mapped file, its hyper-parameters and bound weights. Immutable; many
// contexts may share one model.
class Model {
public:
    explicit Model(const std::string& path);
    explicit Model(std::shared_ptr<const io::GGUFFile> file);

    const HParams& hparams() const { return hp_; }
    const Weights& weights() const { return w_; }
    const io::GGUFFile& file() const { return *file_; }
    std::shared_ptr<const io::GGUFFile> file_ptr() const { return file_; }
    const kernels::Rope* rope() const { return rope_.get(); }

private:
    std::shared_ptr<const io::GGUFFile> file_;
    HParams hp_;
    Weights w_;
    std::unique_ptr<kernels::Rope> rope_;
};

// The mutable state of one sequence: KV cache, position and activation buffers (allocated for
// the largest batch once and reused, so decoding allocates nothing per token).
class Context {
public:
    // kv_type: F16 (as llama.cpp) or F32 (exact; the reference tests use it).
    Context(const Model& model, int n_ctx, int n_threads, int n_batch = 512,
            DType kv_type = DType::F16);

    // Appends tokens at positions n_past()..; returns logits, row-major: one row of n_vocab per
    // token when all_logits, otherwise only the last token's row.
    std::span<const float> forward(std::span<const int32_t> tokens, bool all_logits = false);

    int n_past() const { return n_past_; }
    int n_ctx() const { return cache_.n_ctx(); }
    const KVCache& kv_cache() const { return cache_; }
    void reset() { n_past_ = 0; }
    const Model& model() const { return model_; }
    ThreadPool& pool() { return pool_; }

private:
    void forward_batch(std::span<const int32_t> tokens, float* logits, bool all_logits);
    void attention_block(int il, int64_t T);
    void ffn_block(int il, int64_t T);
    void moe_block(int il, int64_t T);

    const Model& model_;
    KVCache cache_;
    ThreadPool pool_;
    int n_batch_;
    int n_past_ = 0;
    // activations, sized for n_batch tokens
    std::vector<float> x_, h_, q_, k_, v_, attn_, ff_a_, ff_b_, ff_out_, logits_;
    kernels::SharedActivations shared_input_;  // normed input, converted once per partner type
    // MoE routing state, kept so that routing allocates nothing once warm
    std::vector<float> moe_probs_, moe_in_, moe_gate_, moe_up_, moe_out_;
    std::vector<std::vector<std::pair<int64_t, float>>> moe_routed_;  // per expert: (token, weight)
    std::vector<int64_t> moe_order_;
};

}  // namespace syslm::model
