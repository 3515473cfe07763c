#include "model/hparams.hpp"

#include <cmath>

#include "core/error.hpp"

namespace syslm::model {
namespace {

Arch parse_arch(const std::string& name, const std::string& path) {
    if (name == "llama") return Arch::Llama;
    if (name == "qwen2") return Arch::Qwen2;
    if (name == "qwen2moe") return Arch::Qwen2Moe;
    if (name == "gpt2") return Arch::Gpt2;
    fail(path, ": unsupported architecture '", name,
         "' (supported: llama, mistral/mixtral as llama, qwen2, qwen2moe, gpt2)");
}

}  // namespace

HParams load_hparams(const io::GGUFFile& f) {
    HParams hp;
    hp.arch_name = f.get_string("general.architecture");
    hp.arch = parse_arch(hp.arch_name, f.path());
    const std::string a = hp.arch_name + ".";
    hp.n_ctx_train = static_cast<int>(f.get_u32(a + "context_length"));
    hp.n_embd = static_cast<int>(f.get_u32(a + "embedding_length"));
    hp.n_layer = static_cast<int>(f.get_u32(a + "block_count"));
    hp.n_head = static_cast<int>(f.get_u32(a + "attention.head_count"));
    hp.n_head_kv = static_cast<int>(f.get_u32(a + "attention.head_count_kv", hp.n_head));
    hp.n_ff = static_cast<int>(f.get_u32(a + "feed_forward_length", 0));
    SYSLM_CHECK(hp.n_embd > 0 && hp.n_layer > 0 && hp.n_head > 0 && hp.n_head_kv > 0, f.path(),
                ": embedding_length, block_count and head counts must be positive");
    SYSLM_CHECK(hp.n_head % hp.n_head_kv == 0, f.path(), ": head_count ", hp.n_head,
                " is not a multiple of head_count_kv ", hp.n_head_kv);
    hp.head_dim = static_cast<int>(f.get_u32(a + "attention.key_length", hp.n_embd / hp.n_head));
    SYSLM_CHECK(hp.head_dim > 0 && f.get_u32(a + "attention.value_length", hp.head_dim) ==
                                       static_cast<uint32_t>(hp.head_dim),
                f.path(), ": attention key and value lengths must be equal and positive");
    hp.norm_eps = hp.arch == Arch::Gpt2 ? f.get_f32(a + "attention.layer_norm_epsilon")
                                        : f.get_f32(a + "attention.layer_norm_rms_epsilon");
    hp.sliding_window = static_cast<int>(f.get_u32(a + "attention.sliding_window", 0));

    hp.n_expert = static_cast<int>(f.get_u32(a + "expert_count", 0));
    hp.n_expert_used = static_cast<int>(f.get_u32(a + "expert_used_count", 0));
    if (hp.n_expert > 0) {
        SYSLM_CHECK(hp.n_expert_used > 0 && hp.n_expert_used <= hp.n_expert, f.path(),
                    ": expert_used_count ", hp.n_expert_used, " must be in 1..", hp.n_expert);
        hp.n_ff_exp = static_cast<int>(f.get_u32(a + "expert_feed_forward_length", hp.n_ff));
        hp.n_ff_shexp = static_cast<int>(f.get_u32(a + "expert_shared_feed_forward_length", 0));
        // Mixtral renormalises the top-k weights; Qwen2-MoE (norm_topk_prob=false) does not.
        hp.expert_weights_norm = f.get_bool(a + "expert_weights_norm", hp.arch == Arch::Llama);
    } else {
        SYSLM_CHECK(hp.n_ff > 0, f.path(), ": ", a, "feed_forward_length must be positive");
    }

    if (hp.has_rope()) {
        auto& r = hp.rope;
        r.mode = hp.arch == Arch::Llama ? kernels::RopeMode::Norm : kernels::RopeMode::Neox;
        r.n_rot = static_cast<int>(f.get_u32(a + "rope.dimension_count", hp.head_dim));
        SYSLM_CHECK(r.n_rot > 0 && r.n_rot <= hp.head_dim && r.n_rot % 2 == 0, f.path(),
                    ": rope.dimension_count ", r.n_rot, " must be even and <= head size ",
                    hp.head_dim);
        r.freq_base = f.get_f32(a + "rope.freq_base", 10000.0f);
        const std::string scaling = f.get_string(a + "rope.scaling.type", "none");
        float factor = f.get_f32(a + "rope.scaling.factor", 0.0f);
        if (factor == 0.0f) factor = 1.0f / f.get_f32(a + "rope.scale_linear", 1.0f);
        if (scaling == "linear") {
            r.freq_scale = 1.0f / factor;
        } else if (scaling == "yarn") {
            r.freq_scale = 1.0f / factor;
            r.yarn_orig_ctx = static_cast<int>(
                f.get_u32(a + "rope.scaling.original_context_length", hp.n_ctx_train));
            r.yarn_attn_factor = f.get_f32(a + "rope.scaling.attn_factor", 1.0f);
            r.yarn_beta_fast = f.get_f32(a + "rope.scaling.yarn_beta_fast", 32.0f);
            r.yarn_beta_slow = f.get_f32(a + "rope.scaling.yarn_beta_slow", 1.0f);
        } else if (scaling != "none") {
            fail(f.path(), ": unsupported ", a, "rope.scaling.type '", scaling,
                 "' (supported: none, linear, yarn; llama3 scaling is the rope_freqs tensor)");
        }
        SYSLM_CHECK(r.freq_scale > 0 && std::isfinite(r.freq_scale), f.path(),
                    ": invalid rope scaling factor ", factor);
    }
    return hp;
}

}  // namespace syslm::model
