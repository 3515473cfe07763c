// Hyper-parameters of a decoder-only transformer, read from GGUF metadata with llama.cpp's keys
// (`<arch>.embedding_length`, ...). One struct covers every supported architecture; the
// architecture decides which blocks the forward pass uses.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/gguf.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/ffn_activation.hpp"
#include "kernels/cpu/moe_routing.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/cpu/rope.hpp"

namespace syslm::model {

enum class Arch {
    Llama,     // llama, mistral, mixtral (MoE when expert_count > 0): RMSNorm, SwiGLU, RoPE(norm)
    Qwen2,     // qwen2: llama + QKV bias, RoPE(neox)
    Qwen2Moe,  // qwen2moe: qwen2 + routed experts + gated shared expert
    Qwen3,     // qwen3: qwen2 without the QKV bias, with per-head RMSNorm of q and k
    Qwen3Moe,  // qwen3moe: qwen3 + routed experts (no shared one), renormalised top-k
    Gpt2,      // gpt2: LayerNorm, learned positions, fused QKV, GELU, biases everywhere
    Bloom,     // bloom: gpt2 with ALiBi instead of positions and a LayerNorm of the embeddings
    Mpt,       // mpt: ALiBi, fused QKV, exact GELU, LayerNorm without bias, no biases at all
    Phi3,      // phi3: llama with fused QKV and gate-up (ffn_up = [gate | up]), LongRoPE
    Gemma2,    // gemma2: GeGLU, post-norms, scaled embeddings, 1:1 local/global, soft-capping
    Gemma3,    // gemma3: gemma2 without soft-capping, with q/k norms, 5:1, a local RoPE base
};

// What an architecture's blocks are made of: the one description that loading, the inference
// forward and the training model all follow (no other code branches on Arch). A new layer kind
// is a new value of one of these kinds, its kernels (forward and backward), and the entries of
// the architectures that use it.
using kernels::NormKind;
// rotary | a learned position_embd table | ALiBi's per-head distance penalty on the scores
enum class PositionKind { Rope, Learned, Alibi };
struct ArchSpec {
    NormKind norm = NormKind::Rms;
    PositionKind position = PositionKind::Rope;
    kernels::RopeMode rope_mode = kernels::RopeMode::Norm;
    kernels::FfnActivation ffn = kernels::FfnActivation::SwiGLU;  // the dense FFN's
    bool fused_qkv = false;      // one attn_qkv matrix whose rows are [q | k | v]
    bool fused_gate_up = false;  // ffn_up holds the gate's rows, then the up rows (phi3)
    bool qkv_bias = false;       // biases on q, k and v (qwen2)
    // Per-head RMSNorm of q and k after their projection, before RoPE (qwen3): weights
    // attn_q_norm / attn_k_norm of head_dim each, shared by the heads.
    bool qk_norm = false;
    bool linear_biases = false;   // biases on every linear layer and norm (gpt2)
    bool renorm_experts = false;  // default of expert_weights_norm (Mixtral renormalises top-k)
    bool embed_norm = false;      // a norm of the embedding rows, token_embd_norm (bloom)
    bool embed_scale = false;     // embedding rows times sqrt(n_embd) (gemma)
    // Norms of the attention's and the FFN's outputs before their residual adds,
    // post_attention_norm / post_ffw_norm (gemma 2 and 3).
    bool post_norms = false;
    // Local layers rotate with their own RoPE, rope.freq_base_swa and no scaling (gemma3: base
    // 10000; the global layers' base and scaling are rope.freq_base / rope.scaling.*).
    bool local_rope = false;
    // Without attention.sliding_window_pattern, llama.cpp's period n for a windowed model (layer
    // il local unless il % n == n - 1; gemma3: 6); 0: every layer local (mistral).
    int swa_period = 0;
    bool ties_head = false;  // new models' head is the embedding (gemma): no output.weight
    // Defaults of attn_logit_softcapping / final_logit_softcapping (gemma2: 50 and 30, as
    // llama.cpp): c tanh(x / c) of the scaled attention scores / of the logits; 0: none.
    float attn_softcap = 0.0f, final_softcap = 0.0f;
    const char* norm_eps_key = "attention.layer_norm_rms_epsilon";
    // Training: models it trains only as dense blocks without tensor or pipeline parallelism
    // (gpt2's fused QKV and learned positions are not cut), and the GGUF's second copy of a
    // head tied to the embedding (gpt2: llama.cpp requires output.weight).
    bool dense_unsplit_training = false;
    bool stores_tied_head_twice = false;
};
const ArchSpec& arch_spec(Arch arch);
// The architecture of a general.architecture name; an error names `where` and the supported ones.
Arch parse_arch(const std::string& name, const std::string& where);

// A setting chosen by input length: inputs up to lengths[i] tokens take values[i], longer ones
// than the last length the last value (HParams::window_policy, expert_policy).
struct LengthPolicy {
    std::vector<int> lengths;  // increasing
    std::vector<double> values;
    bool empty() const { return values.empty(); }
    double at(int64_t n) const {
        for (size_t i = 0; i < lengths.size(); ++i)
            if (n <= lengths[i]) return values[i];
        return values.back();
    }
};

struct HParams {
    Arch arch;
    const ArchSpec& spec() const { return arch_spec(arch); }
    std::string arch_name;  // general.architecture
    int n_vocab = 0;
    int n_ctx_train = 0;
    int n_embd = 0;
    int n_layer = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;  // key/value length per head
    int n_ff = 0;      // dense FFN width
    float norm_eps = 1e-5f;
    int sliding_window = 0;  // 0: full causal attention
    // Which layers the window applies to (attention.sliding_window_pattern): local layers see
    // the last sliding_window positions, global ones all. Empty: every layer is local.
    std::vector<bool> local_layers;
    int window(int il) const {  // layer il's window, 0 for global attention
        return local_layers.empty() || local_layers[static_cast<size_t>(il)] ? sliding_window : 0;
    }
    // Runs the local layers with window w instead of the file's (a model trained with a range
    // of windows, `syslm train --window-range`); throws Error for a model without local layers.
    void set_window(int w);
    // The window chosen by input length (syslm's attention.window_policy.lengths / .windows,
    // written by `syslm tune window`). Empty: none.
    LengthPolicy window_policy;
    // The policy's window for an input of n tokens; throws Error naming the keys without one.
    int window_for_length(int64_t n) const;
    // The first global_tokens positions stay visible to the local layers besides their windows
    // (Longformer's global tokens, StreamingLLM's sinks; syslm's attention.global_tokens).
    int global_tokens = 0;
    // BigBird's random blocks (syslm's attention.random_blocks, .random_block_size and
    // .random_seed): each local layer's query block of random_block_size positions also sees
    // random_blocks key blocks drawn before its window (kernels::random_key_blocks; the draw
    // differs by layer). 0: none. Their layers keep every position's K/V (no ring).
    int random_blocks = 0;
    int random_block_size = 0;
    uint32_t random_seed = 0;
    // The layer index each layer's draw is keyed by (syslm's attention.random_layers, written by
    // `prune` when it removes layers, so the kept layers keep their blocks). Empty: its own.
    std::vector<uint32_t> random_layers;
    // Cross-layer parameter sharing (ALBERT; syslm's block_source): layer il computes with block
    // block_source[il]'s tensors, which the file holds once. Every source is at most its layer
    // and its own source, so a shared block's last use in the backward is its own layer.
    // Empty: every layer has its own block.
    std::vector<int> block_source;
    int block_of(int il) const {
        return block_source.empty() ? il : block_source[static_cast<size_t>(il)];
    }
    bool shares_blocks() const { return !block_source.empty(); }
    // Layers whose attention is linear (syslm's attention.linear_pattern; AttentionShape::
    // linear): phi(q).phi(k) prefix sums instead of the softmax. Empty: none.
    std::vector<bool> linear_layers;
    bool linear_attention(int il) const {
        return !linear_layers.empty() && linear_layers[static_cast<size_t>(il)];
    }
    // Conv + attention hybrids (syslm's attention.conv_kernel): every layer's attention input
    // is a causal depthwise convolution of k taps over its attention norm's output
    // (kernels/cpu/causal_conv.hpp; taps blk.N.attn_conv.weight, k rows of n_embd). 0: none.
    int conv_kernel = 0;
    // The dense SwiGLU's gate with a learned Swish beta per channel, blk.N.ffn_act_beta
    // (syslm's feed_forward.swish_beta; kernels::swish_beta_glu).
    bool swish_beta = false;

    // Mixture of experts (n_expert == 0: dense FFN).
    int n_expert = 0;
    int n_expert_used = 0;
    int n_ff_exp = 0;                  // width of one routed expert
    int n_ff_shexp = 0;                // width of the shared expert (qwen2moe)
    bool expert_weights_norm = false;  // renormalise the top-k routing weights to sum to 1
    // Top-p routing (syslm's keys expert_top_p, expert_used_count_min): experts in order of
    // probability until they sum to expert_top_p, between expert_used_min and n_expert_used of
    // them. 0: top-k (n_expert_used each).
    float expert_top_p = 0.0f;
    int expert_used_min = 0;
    kernels::MoeRouting moe_routing() const {
        return {n_expert_used, expert_used_min, expert_top_p, expert_weights_norm};
    }
    // Runs a top-p routed model with another p (fewer or more experts per token; `generate` /
    // `perplexity --expert-top-p`); throws Error for a model that does not route top-p.
    void set_expert_top_p(float p);
    // Top-p chosen by input length (seed 000 §3.1: the active experts follow the input; syslm's
    // expert_policy.lengths / .top_p, written by `syslm tune experts`). Empty: none.
    LengthPolicy expert_policy;
    // The policy's p for an input of n tokens; throws Error naming the keys without one.
    float top_p_for_length(int64_t n) const;

    bool has_rope() const { return spec().position == PositionKind::Rope; }
    // ALiBi: attention.max_alibi_bias (bloom and mpt: 8) and the slopes it gives each head.
    float max_alibi_bias = 0.0f;
    std::vector<float> alibi_slopes;
    kernels::RopeConfig rope;  // n_rot, base, scaling (freq_factors are loaded with the weights)
    // ArchSpec::local_rope: the local layers' RoPE (set when the model has a window).
    std::optional<kernels::RopeConfig> rope_local;
    // LongRoPE (phi3): rope.freq_factors are the short factors (rope_factors_short); rope_long
    // has the long ones (rope_factors_long), which a context longer than rope_orig_ctx uses, as
    // llama.cpp chooses (load_weights sets both).
    std::optional<kernels::RopeConfig> rope_long;
    int rope_orig_ctx = 0;
    const kernels::RopeConfig& rope_for(int64_t n_ctx) const {
        return rope_long && n_ctx > rope_orig_ctx ? *rope_long : rope;
    }
    // The attention's score scale (attention.scale; gemma: query_pre_attn_scalar^-1/2); 0: the
    // usual 1 / sqrt(head_dim).
    float attn_scale = 0.0f;
    float attn_softcap = 0.0f, final_softcap = 0.0f;  // ArchSpec's, or the file's keys

    int q_dim() const { return n_head * head_dim; }
    int kv_dim() const { return n_head_kv * head_dim; }
};

// Layer il's attention as its kernels take it (heads, widths, window, scale): what the inference
// forward and the training model both read. The KV cache's element type is the caller's (F32
// here).
kernels::AttentionShape attention_shape(const HParams& hp, int il);

// The (query, key) pairs layer il's attention visits for T tokens from position 0, the work
// count of profiles and MFU; a linear layer's prefix sums as the pairs of the same FLOPs
// (2 T d^2 (n_head + n_head_kv) = 4 pairs q_dim).
double attention_pairs(const HParams& hp, int il, int64_t T);

// Reads and checks hyper-parameters; errors name the file and the key.
HParams load_hparams(const io::GGUFFile& file);

}  // namespace syslm::model
