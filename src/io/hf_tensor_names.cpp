#include "io/hf_tensor_names.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.hpp"

namespace syslm::io {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += cat(i ? ", " : "", s[i]);
    return out + "]";
}

// Collects the plan while checking each source against the checkpoint.
class Planner {
public:
    Planner(const HFShapes& shapes, std::string where)
        : shapes_(shapes), where_(std::move(where)) {}

    // One HF tensor -> one GGUF tensor. Returns false when an optional source is absent.
    bool add(std::string gguf, const std::string& hf, std::vector<int64_t> shape,
             HFTransform tr = HFTransform::None, bool required = true) {
        if (!shapes_.count(hf)) {
            SYSLM_CHECK(!required, where_, ": missing tensor '", hf, "' (for ", gguf, ")");
            return false;
        }
        check_shape(hf, shape);
        HFTensorPlan p;
        p.name = std::move(gguf);
        p.sources = {hf};
        p.transform = tr;
        p.ne = result_ne(shape, tr);
        p.source_shape = std::move(shape);
        used_.insert(hf);
        plans_.push_back(std::move(p));
        return true;
    }

    // Per-expert tensors stacked along a new outermost dimension.
    void add_experts(std::string gguf, const std::vector<std::string>& hf,
                     std::vector<int64_t> shape) {
        for (const auto& name : hf) {
            SYSLM_CHECK(shapes_.count(name), where_, ": missing tensor '", name, "' (for ", gguf,
                        ")");
            check_shape(name, shape);
            used_.insert(name);
        }
        HFTensorPlan p;
        p.name = std::move(gguf);
        p.sources = hf;
        p.ne = result_ne(shape, HFTransform::None);
        p.ne.push_back(static_cast<int64_t>(hf.size()));
        p.source_shape = std::move(shape);
        plans_.push_back(std::move(p));
    }

    void add_generated(std::string gguf, std::vector<float> data) {
        HFTensorPlan p;
        p.name = std::move(gguf);
        p.ne = {static_cast<int64_t>(data.size())};
        p.generated = std::move(data);
        plans_.push_back(std::move(p));
    }

    // A GGUF tensor that repeats another's source (GPT-2's tied output).
    void add_copy(std::string gguf, const std::string& hf, std::vector<int64_t> shape) {
        HFTensorPlan p;
        p.name = std::move(gguf);
        p.sources = {hf};
        p.ne = result_ne(shape, HFTransform::None);
        p.source_shape = std::move(shape);
        plans_.push_back(std::move(p));
    }

    void ignore(const std::string& hf) {
        if (shapes_.count(hf)) used_.insert(hf);
    }
    void ignore_prefix(const std::string& prefix) {
        for (const auto& [name, shape] : shapes_)
            if (name.starts_with(prefix)) used_.insert(name);
    }
    bool has(const std::string& hf) const { return shapes_.count(hf) > 0; }
    const std::string& where() const { return where_; }

    std::vector<HFTensorPlan> finish(const std::string& arch) {
        for (const auto& [name, shape] : shapes_)
            SYSLM_CHECK(used_.count(name), where_, ": unexpected tensor '", name, "' ",
                        shape_str(shape), " is not used by the ", arch,
                        " architecture (wrong config.json, or an unsupported variant)");
        return std::move(plans_);
    }

private:
    void check_shape(const std::string& hf, const std::vector<int64_t>& want) const {
        const auto& got = shapes_.at(hf);
        SYSLM_CHECK(got == want, where_, ": tensor '", hf, "' has shape ", shape_str(got),
                    ", expected ", shape_str(want), " from config.json");
    }
    static std::vector<int64_t> result_ne(const std::vector<int64_t>& shape, HFTransform tr) {
        std::vector<int64_t> ne(shape.rbegin(), shape.rend());
        if (tr == HFTransform::Transpose) std::swap(ne[0], ne[1]);
        return ne;
    }

    const HFShapes& shapes_;
    std::string where_;
    std::set<std::string> used_;
    std::vector<HFTensorPlan> plans_;
};

std::string blk(int64_t i, const char* t) {
    return "blk." + std::to_string(i) + "." + t;
}

// Block i's FFN: Mixtral's block_sparse_moe, Qwen-MoE's mlp.experts (with Qwen2-MoE's shared
// expert), or the dense mlp.
void plan_llama_ffn(const HFModelSpec& s, Planner& p, int64_t i, const std::string& L) {
    const int64_t E = s.n_embd;
    auto experts = [&](const std::string& fmt_prefix, const char* w) {
        std::vector<std::string> names;
        for (int64_t e = 0; e < s.n_expert; ++e)
            names.push_back(L + fmt_prefix + std::to_string(e) + "." + w + ".weight");
        return names;
    };
    switch (s.family) {
        case HFFamily::Mixtral: {
            const int64_t F = s.n_ff_exp;
            p.add(blk(i, "ffn_gate_inp.weight"), L + "block_sparse_moe.gate.weight",
                  {s.n_expert, E});
            p.add_experts(blk(i, "ffn_gate_exps.weight"),
                          experts("block_sparse_moe.experts.", "w1"), {F, E});
            p.add_experts(blk(i, "ffn_down_exps.weight"),
                          experts("block_sparse_moe.experts.", "w2"), {E, F});
            p.add_experts(blk(i, "ffn_up_exps.weight"), experts("block_sparse_moe.experts.", "w3"),
                          {F, E});
            break;
        }
        case HFFamily::Qwen3Moe:
        case HFFamily::Qwen2Moe: {
            const int64_t F = s.n_ff_exp, S = s.n_ff_shexp;
            p.add(blk(i, "ffn_gate_inp.weight"), L + "mlp.gate.weight", {s.n_expert, E});
            p.add_experts(blk(i, "ffn_gate_exps.weight"), experts("mlp.experts.", "gate_proj"),
                          {F, E});
            p.add_experts(blk(i, "ffn_down_exps.weight"), experts("mlp.experts.", "down_proj"),
                          {E, F});
            p.add_experts(blk(i, "ffn_up_exps.weight"), experts("mlp.experts.", "up_proj"), {F, E});
            if (s.family == HFFamily::Qwen3Moe) break;  // no shared expert
            p.add(blk(i, "ffn_gate_inp_shexp.weight"), L + "mlp.shared_expert_gate.weight", {1, E});
            p.add(blk(i, "ffn_gate_shexp.weight"), L + "mlp.shared_expert.gate_proj.weight",
                  {S, E});
            p.add(blk(i, "ffn_down_shexp.weight"), L + "mlp.shared_expert.down_proj.weight",
                  {E, S});
            p.add(blk(i, "ffn_up_shexp.weight"), L + "mlp.shared_expert.up_proj.weight", {S, E});
            break;
        }
        default: {
            const int64_t F = s.n_ff;
            p.add(blk(i, "ffn_gate.weight"), L + "mlp.gate_proj.weight", {F, E});
            p.add(blk(i, "ffn_down.weight"), L + "mlp.down_proj.weight", {E, F});
            p.add(blk(i, "ffn_up.weight"), L + "mlp.up_proj.weight", {F, E});
            if (s.mlp_bias) {
                p.add(blk(i, "ffn_gate.bias"), L + "mlp.gate_proj.bias", {F});
                p.add(blk(i, "ffn_down.bias"), L + "mlp.down_proj.bias", {E});
                p.add(blk(i, "ffn_up.bias"), L + "mlp.up_proj.bias", {F});
            }
        }
    }
}

// Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3 share HF's `model.layers.N.*` naming.
std::vector<HFTensorPlan> plan_llama_like(const HFModelSpec& s, Planner& p) {
    const int64_t E = s.n_embd, hd = s.head_dim;
    const int64_t q_dim = s.n_head * hd, kv_dim = s.n_head_kv * hd;
    const HFTransform tq = s.permute_qk ? HFTransform::PermuteQ : HFTransform::None;
    const HFTransform tk = s.permute_qk ? HFTransform::PermuteK : HFTransform::None;

    p.add("token_embd.weight", "model.embed_tokens.weight", {s.n_vocab, E});
    if (!s.rope_freqs.empty()) p.add_generated("rope_freqs.weight", s.rope_freqs);
    for (int64_t i = 0; i < s.n_layer; ++i) {
        const std::string L = "model.layers." + std::to_string(i) + ".";
        p.add(blk(i, "attn_norm.weight"), L + "input_layernorm.weight", {E});
        p.add(blk(i, "attn_q.weight"), L + "self_attn.q_proj.weight", {q_dim, E}, tq);
        p.add(blk(i, "attn_k.weight"), L + "self_attn.k_proj.weight", {kv_dim, E}, tk);
        p.add(blk(i, "attn_v.weight"), L + "self_attn.v_proj.weight", {kv_dim, E});
        p.add(blk(i, "attn_output.weight"), L + "self_attn.o_proj.weight", {E, q_dim});
        if (s.qkv_bias) {
            p.add(blk(i, "attn_q.bias"), L + "self_attn.q_proj.bias", {q_dim}, tq);
            p.add(blk(i, "attn_k.bias"), L + "self_attn.k_proj.bias", {kv_dim}, tk);
            p.add(blk(i, "attn_v.bias"), L + "self_attn.v_proj.bias", {kv_dim});
        }
        if (s.o_bias) p.add(blk(i, "attn_output.bias"), L + "self_attn.o_proj.bias", {E});
        if (s.qk_norm) {
            p.add(blk(i, "attn_q_norm.weight"), L + "self_attn.q_norm.weight", {hd});
            p.add(blk(i, "attn_k_norm.weight"), L + "self_attn.k_norm.weight", {hd});
        }
        p.ignore(L + "self_attn.rotary_emb.inv_freq");  // a buffer older checkpoints saved
        p.add(blk(i, "ffn_norm.weight"), L + "post_attention_layernorm.weight", {E});

        plan_llama_ffn(s, p, i, L);
    }
    p.add("output_norm.weight", "model.norm.weight", {E});
    // Tied models save no lm_head; llama.cpp then reads token_embd for the output (no copy).
    p.add("output.weight", "lm_head.weight", {s.n_vocab, E}, HFTransform::None, !s.tied_embeddings);
    return p.finish(s.arch);
}

// lm_head as output.weight, or (tied, not saved) a copy of the embedding: llama.cpp's gpt2 and
// bloom require output.weight, and its converter repeats the tied embedding there.
void add_output_or_tied_copy(const HFModelSpec& s, Planner& p, const std::string& embedding) {
    if (p.add("output.weight", "lm_head.weight", {s.n_vocab, s.n_embd}, HFTransform::None, false))
        return;
    SYSLM_CHECK(s.tied_embeddings, p.where(),
                ": config.json has tie_word_embeddings=false but there is no lm_head.weight");
    p.add_copy("output.weight", embedding, {s.n_vocab, s.n_embd});
}

std::vector<HFTensorPlan> plan_gpt2(const HFModelSpec& s, Planner& p) {
    const int64_t E = s.n_embd, F = s.n_ff;
    // GPT2LMHeadModel saves `transformer.*`; the original OpenAI checkpoints have no prefix.
    const std::string T =
        p.has("transformer.wte.weight") || !p.has("wte.weight") ? "transformer." : "";
    p.add("token_embd.weight", T + "wte.weight", {s.n_vocab, E});
    p.add("position_embd.weight", T + "wpe.weight", {s.n_ctx, E});
    for (int64_t i = 0; i < s.n_layer; ++i) {
        const std::string L = T + "h." + std::to_string(i) + ".";
        p.add(blk(i, "attn_norm.weight"), L + "ln_1.weight", {E});
        p.add(blk(i, "attn_norm.bias"), L + "ln_1.bias", {E});
        p.add(blk(i, "attn_qkv.weight"), L + "attn.c_attn.weight", {E, 3 * E},
              HFTransform::Transpose);
        p.add(blk(i, "attn_qkv.bias"), L + "attn.c_attn.bias", {3 * E});
        p.add(blk(i, "attn_output.weight"), L + "attn.c_proj.weight", {E, E},
              HFTransform::Transpose);
        p.add(blk(i, "attn_output.bias"), L + "attn.c_proj.bias", {E});
        p.ignore(L + "attn.bias");  // causal-mask buffers of older checkpoints
        p.ignore(L + "attn.masked_bias");
        p.add(blk(i, "ffn_norm.weight"), L + "ln_2.weight", {E});
        p.add(blk(i, "ffn_norm.bias"), L + "ln_2.bias", {E});
        p.add(blk(i, "ffn_up.weight"), L + "mlp.c_fc.weight", {E, F}, HFTransform::Transpose);
        p.add(blk(i, "ffn_up.bias"), L + "mlp.c_fc.bias", {F});
        p.add(blk(i, "ffn_down.weight"), L + "mlp.c_proj.weight", {F, E}, HFTransform::Transpose);
        p.add(blk(i, "ffn_down.bias"), L + "mlp.c_proj.bias", {E});
    }
    p.add("output_norm.weight", T + "ln_f.weight", {E});
    p.add("output_norm.bias", T + "ln_f.bias", {E});
    add_output_or_tied_copy(s, p, T + "wte.weight");
    return p.finish(s.arch);
}

// BloomForCausalLM: `transformer.*` (bare in BloomModel checkpoints); Linear weights are already
// [out, in]; the fused QKV is regrouped from per-head to q | k | v.
std::vector<HFTensorPlan> plan_bloom(const HFModelSpec& s, Planner& p) {
    const int64_t E = s.n_embd, F = s.n_ff;
    const std::string T =
        p.has("transformer.word_embeddings.weight") || !p.has("word_embeddings.weight")
            ? "transformer."
            : "";
    p.add("token_embd.weight", T + "word_embeddings.weight", {s.n_vocab, E});
    p.add("token_embd_norm.weight", T + "word_embeddings_layernorm.weight", {E});
    p.add("token_embd_norm.bias", T + "word_embeddings_layernorm.bias", {E});
    for (int64_t i = 0; i < s.n_layer; ++i) {
        const std::string L = T + "h." + std::to_string(i) + ".";
        p.add(blk(i, "attn_norm.weight"), L + "input_layernorm.weight", {E});
        p.add(blk(i, "attn_norm.bias"), L + "input_layernorm.bias", {E});
        p.add(blk(i, "attn_qkv.weight"), L + "self_attention.query_key_value.weight", {3 * E, E},
              HFTransform::GroupQkv);
        p.add(blk(i, "attn_qkv.bias"), L + "self_attention.query_key_value.bias", {3 * E},
              HFTransform::GroupQkv);
        p.add(blk(i, "attn_output.weight"), L + "self_attention.dense.weight", {E, E});
        p.add(blk(i, "attn_output.bias"), L + "self_attention.dense.bias", {E});
        p.add(blk(i, "ffn_norm.weight"), L + "post_attention_layernorm.weight", {E});
        p.add(blk(i, "ffn_norm.bias"), L + "post_attention_layernorm.bias", {E});
        p.add(blk(i, "ffn_up.weight"), L + "mlp.dense_h_to_4h.weight", {F, E});
        p.add(blk(i, "ffn_up.bias"), L + "mlp.dense_h_to_4h.bias", {F});
        p.add(blk(i, "ffn_down.weight"), L + "mlp.dense_4h_to_h.weight", {E, F});
        p.add(blk(i, "ffn_down.bias"), L + "mlp.dense_4h_to_h.bias", {E});
    }
    p.add("output_norm.weight", T + "ln_f.weight", {E});
    p.add("output_norm.bias", T + "ln_f.bias", {E});
    add_output_or_tied_copy(s, p, T + "word_embeddings.weight");
    return p.finish(s.arch);
}

// MptForCausalLM: `transformer.*`; Wqkv rows are already q | k | v; no biases; the head is the
// embedding (llama.cpp reads token_embd when output.weight is absent).
std::vector<HFTensorPlan> plan_mpt(const HFModelSpec& s, Planner& p) {
    const int64_t E = s.n_embd, F = s.n_ff;
    const std::string T = "transformer.";
    p.add("token_embd.weight", T + "wte.weight", {s.n_vocab, E});
    for (int64_t i = 0; i < s.n_layer; ++i) {
        const std::string L = T + "blocks." + std::to_string(i) + ".";
        p.add(blk(i, "attn_norm.weight"), L + "norm_1.weight", {E});
        p.add(blk(i, "attn_qkv.weight"), L + "attn.Wqkv.weight", {3 * E, E});
        p.add(blk(i, "attn_output.weight"), L + "attn.out_proj.weight", {E, E});
        p.add(blk(i, "ffn_norm.weight"), L + "norm_2.weight", {E});
        p.add(blk(i, "ffn_up.weight"), L + "ffn.up_proj.weight", {F, E});
        p.add(blk(i, "ffn_down.weight"), L + "ffn.down_proj.weight", {E, F});
    }
    p.add("output_norm.weight", T + "norm_f.weight", {E});
    p.add("output.weight", "lm_head.weight", {s.n_vocab, E}, HFTransform::None, false);
    return p.finish(s.arch);
}

// Phi3ForCausalLM: `model.layers.N.*` with qkv_proj (rows q | k | v) and gate_up_proj (rows
// gate | up, stored as ffn_up as llama.cpp does), and LongRoPE's factors as two tensors.
std::vector<HFTensorPlan> plan_phi3(const HFModelSpec& s, Planner& p) {
    const int64_t E = s.n_embd, F = s.n_ff;
    const int64_t qkv = (s.n_head + 2 * s.n_head_kv) * s.head_dim;
    p.add("token_embd.weight", "model.embed_tokens.weight", {s.n_vocab, E});
    if (!s.rope_factors_long.empty()) {
        p.add_generated("rope_factors_long.weight", s.rope_factors_long);
        p.add_generated("rope_factors_short.weight", s.rope_factors_short);
    }
    for (int64_t i = 0; i < s.n_layer; ++i) {
        const std::string L = "model.layers." + std::to_string(i) + ".";
        p.add(blk(i, "attn_norm.weight"), L + "input_layernorm.weight", {E});
        p.add(blk(i, "attn_qkv.weight"), L + "self_attn.qkv_proj.weight", {qkv, E});
        p.add(blk(i, "attn_output.weight"), L + "self_attn.o_proj.weight",
              {E, s.n_head * s.head_dim});
        p.add(blk(i, "ffn_norm.weight"), L + "post_attention_layernorm.weight", {E});
        p.add(blk(i, "ffn_up.weight"), L + "mlp.gate_up_proj.weight", {2 * F, E});
        p.add(blk(i, "ffn_down.weight"), L + "mlp.down_proj.weight", {E, F});
    }
    p.add("output_norm.weight", "model.norm.weight", {E});
    p.add("output.weight", "lm_head.weight", {s.n_vocab, E}, HFTransform::None, !s.tied_embeddings);
    return p.finish(s.arch);
}

// Gemma2ForCausalLM / Gemma3ForCausalLM: `model.layers.N.*` with four norms per block (and Gemma
// 3's q/k norms), each stored as 1 + w; the head is the embedding unless lm_head is saved.
std::vector<HFTensorPlan> plan_gemma(const HFModelSpec& s, Planner& p) {
    const int64_t E = s.n_embd, hd = s.head_dim, F = s.n_ff;
    const int64_t q_dim = s.n_head * hd, kv_dim = s.n_head_kv * hd;
    const HFTransform one = HFTransform::AddOne;
    const std::string& P = s.tensor_prefix;  // "language_model." in multimodal checkpoints
    for (const std::string& other : s.ignored_prefixes) p.ignore_prefix(other);
    p.add("token_embd.weight", P + "model.embed_tokens.weight", {s.n_vocab, E});
    for (int64_t i = 0; i < s.n_layer; ++i) {
        const std::string L = P + "model.layers." + std::to_string(i) + ".";
        p.add(blk(i, "attn_norm.weight"), L + "input_layernorm.weight", {E}, one);
        p.add(blk(i, "attn_q.weight"), L + "self_attn.q_proj.weight", {q_dim, E});
        p.add(blk(i, "attn_k.weight"), L + "self_attn.k_proj.weight", {kv_dim, E});
        p.add(blk(i, "attn_v.weight"), L + "self_attn.v_proj.weight", {kv_dim, E});
        if (s.qk_norm) {
            p.add(blk(i, "attn_q_norm.weight"), L + "self_attn.q_norm.weight", {hd}, one);
            p.add(blk(i, "attn_k_norm.weight"), L + "self_attn.k_norm.weight", {hd}, one);
        }
        p.add(blk(i, "attn_output.weight"), L + "self_attn.o_proj.weight", {E, q_dim});
        p.add(blk(i, "post_attention_norm.weight"), L + "post_attention_layernorm.weight", {E},
              one);
        p.add(blk(i, "ffn_norm.weight"), L + "pre_feedforward_layernorm.weight", {E}, one);
        p.add(blk(i, "ffn_gate.weight"), L + "mlp.gate_proj.weight", {F, E});
        p.add(blk(i, "ffn_up.weight"), L + "mlp.up_proj.weight", {F, E});
        p.add(blk(i, "ffn_down.weight"), L + "mlp.down_proj.weight", {E, F});
        p.add(blk(i, "post_ffw_norm.weight"), L + "post_feedforward_layernorm.weight", {E}, one);
    }
    p.add("output_norm.weight", P + "model.norm.weight", {E}, one);
    const std::string head = p.has(P + "lm_head.weight") ? P + "lm_head.weight" : "lm_head.weight";
    p.add("output.weight", head, {s.n_vocab, E}, HFTransform::None, !s.tied_embeddings);
    return p.finish(s.arch);
}

}  // namespace

std::vector<HFTensorPlan> plan_hf_tensors(const HFModelSpec& spec, const HFShapes& shapes,
                                          const std::string& where) {
    Planner p(shapes, where);
    if (spec.family == HFFamily::Gpt2) return plan_gpt2(spec, p);
    if (spec.family == HFFamily::Bloom) return plan_bloom(spec, p);
    if (spec.family == HFFamily::Mpt) return plan_mpt(spec, p);
    if (spec.family == HFFamily::Phi3) return plan_phi3(spec, p);
    if (spec.family == HFFamily::Gemma2 || spec.family == HFFamily::Gemma3)
        return plan_gemma(spec, p);
    return plan_llama_like(spec, p);
}

void permute_rope_rows(const float* src, float* dst, int64_t rows, int64_t cols, int64_t n_head) {
    SYSLM_CHECK(n_head > 0 && rows % (2 * n_head) == 0, "permute: ", rows,
                " rows do not split into ", n_head, " heads of even size");
    const int64_t hd = rows / n_head, half = hd / 2;
    for (int64_t h = 0; h < n_head; ++h)
        for (int64_t j = 0; j < half; ++j)
            for (int64_t s = 0; s < 2; ++s) {
                const int64_t to = h * hd + 2 * j + s, from = h * hd + s * half + j;
                std::memcpy(dst + to * cols, src + from * cols, sizeof(float) * cols);
            }
}

std::vector<float> reorder_hf_rows(std::vector<float> x, int64_t rows, int64_t cols, HFTransform t,
                                   const HFModelSpec& spec) {
    std::vector<float> y(x.size());
    switch (t) {
        case HFTransform::PermuteQ:
            permute_rope_rows(x.data(), y.data(), rows, cols, spec.n_head);
            return y;
        case HFTransform::PermuteK:
            permute_rope_rows(x.data(), y.data(), rows, cols, spec.n_head_kv);
            return y;
        case HFTransform::GroupQkv: {
            const int64_t H = spec.n_head, D = spec.head_dim;
            SYSLM_CHECK(rows == 3 * H * D, rows, " fused QKV rows for ", H, " heads of ", D);
            for (int64_t h = 0; h < H; ++h)
                for (int64_t which = 0; which < 3; ++which)
                    std::copy_n(x.data() + ((h * 3 + which) * D) * cols, D * cols,
                                y.data() + ((which * H + h) * D) * cols);
            return y;
        }
        default:
            return x;
    }
}

bool hf_tensor_forced_f32(const HFTensorPlan& p) {
    const std::string& n = p.name;
    auto ends = [&](std::string_view suf) { return n.ends_with(suf); };
    if (p.ne.size() <= 1 || ends("_norm.weight") || !ends(".weight")) return true;
    if (n == "position_embd.weight") return true;
    // The router (exactly ffn_gate_inp, not the shared expert's ffn_gate_inp_shexp).
    return ends(".ffn_gate_inp.weight");
}

}  // namespace syslm::io
