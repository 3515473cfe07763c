#include "io/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace syslm::io {
namespace {

using json = nlohmann::json;

// Typed access to config.json with errors that name the file and key.
class Config {
public:
    Config(json j, std::string name) : j_(std::move(j)), name_(std::move(name)) {}

    const std::string& name() const { return name_; }
    bool has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
    const json& raw(const std::string& key) const { return j_[key]; }

    // The first of `keys` that is present and not null.
    const json* first(std::initializer_list<const char*> keys) const {
        for (const char* k : keys)
            if (has(k)) return &j_[k];
        return nullptr;
    }

    int64_t pos_int(std::initializer_list<const char*> keys) const {
        const json* v = first(keys);
        if (!v) fail(name_, ": missing ", keys_str(keys));
        return check_pos_int(*v, *keys.begin());
    }
    int64_t pos_int_or(std::initializer_list<const char*> keys, int64_t def) const {
        const json* v = first(keys);
        return v ? check_pos_int(*v, *keys.begin()) : def;
    }
    double number(std::initializer_list<const char*> keys) const {
        const json* v = first(keys);
        if (!v) fail(name_, ": missing ", keys_str(keys));
        return check_number(*v, *keys.begin());
    }
    double number_or(std::initializer_list<const char*> keys, double def) const {
        const json* v = first(keys);
        return v ? check_number(*v, *keys.begin()) : def;
    }
    bool boolean_or(const char* key, bool def) const {
        if (!has(key)) return def;
        SYSLM_CHECK(j_[key].is_boolean(), name_, ": ", key, " must be true or false, found ",
                    j_[key].dump());
        return j_[key].get<bool>();
    }
    std::string string_or(const char* key, std::string def) const {
        if (!has(key)) return def;
        SYSLM_CHECK(j_[key].is_string(), name_, ": ", key, " must be a string, found ",
                    j_[key].dump());
        return j_[key].get<std::string>();
    }

    int64_t check_pos_int(const json& v, const char* key) const {
        SYSLM_CHECK(v.is_number_integer() && v.get<int64_t>() > 0 &&
                        v.get<int64_t>() <= std::numeric_limits<uint32_t>::max(),
                    name_, ": ", key, " must be a positive integer, found ", v.dump());
        return v.get<int64_t>();
    }
    double check_number(const json& v, const char* key) const {
        SYSLM_CHECK(v.is_number() && std::isfinite(v.get<double>()), name_, ": ", key,
                    " must be a number, found ", v.dump());
        return v.get<double>();
    }

private:
    static std::string keys_str(std::initializer_list<const char*> keys) {
        std::string s;
        for (const char* k : keys) s += std::string(s.empty() ? "" : " / ") + k;
        return s;
    }
    json j_;
    std::string name_;
};

struct KVOut {
    std::string prefix;  // "<arch>."
    std::vector<std::pair<std::string, GGUFValue>>& kv;
    void u32(const std::string& k, int64_t v) {
        kv.emplace_back(prefix + k, GGUFValue::u32(static_cast<uint32_t>(v)));
    }
    void f32(const std::string& k, double v) {
        kv.emplace_back(prefix + k, GGUFValue::f32(static_cast<float>(v)));
    }
    void str(const std::string& k, std::string v) {
        kv.emplace_back(prefix + k, GGUFValue::string(std::move(v)));
    }
    void boolean(const std::string& k, bool v) {
        kv.emplace_back(prefix + k, GGUFValue::boolean(v));
    }
    void booleans(const std::string& k, const std::vector<bool>& v) {
        std::vector<GGUFValue> items;
        for (bool b : v) items.push_back(GGUFValue::boolean(b));
        kv.emplace_back(prefix + k, GGUFValue::array(GGUFType::BOOL, items));
    }
};

// RoPE scaling lives in `rope_scaling` (transformers < 5) or `rope_parameters` (>= 5, which also
// carries rope_theta and rope_type "default" when there is no scaling).
struct RopeParams {
    double theta = 10000.0;
    std::string type = "default";
    const json* p = nullptr;  // the object holding the scaling parameters, if any
};

RopeParams read_rope(const Config& c) {
    RopeParams r;
    const json* params = c.first({"rope_parameters", "rope_scaling"});
    if (params) {
        SYSLM_CHECK(params->is_object(), c.name(),
                    ": rope_parameters/rope_scaling must be an object");
        r.p = params;
        if (params->contains("rope_type") && (*params)["rope_type"].is_string())
            r.type = (*params)["rope_type"].get<std::string>();
        else if (params->contains("type") && (*params)["type"].is_string())
            r.type = (*params)["type"].get<std::string>();
        if (params->contains("rope_theta") && !(*params)["rope_theta"].is_null())
            r.theta = c.check_number((*params)["rope_theta"], "rope_parameters.rope_theta");
    }
    if (c.has("rope_theta")) r.theta = c.number({"rope_theta"});
    SYSLM_CHECK(r.theta > 0, c.name(), ": rope_theta must be positive");
    return r;
}

double rope_param(const Config& c, const RopeParams& r, const char* key, double def,
                  bool required) {
    if (r.p && r.p->contains(key) && !(*r.p)[key].is_null())
        return c.check_number((*r.p)[key], key);
    SYSLM_CHECK(!required, c.name(), ": rope scaling '", r.type, "' needs ", key);
    return def;
}

// Writes the scaling keys (or computes rope_freqs) for `linear`, `llama3` and `yarn`.
void add_rope_scaling(const Config& c, const RopeParams& r, HFModelSpec& s, KVOut& out) {
    const std::string& t = r.type;
    if (t == "default" || t.empty()) return;
    if (t == "linear") {
        const double factor = rope_param(c, r, "factor", 1.0, true);
        SYSLM_CHECK(factor > 0, c.name(), ": rope scaling factor must be positive");
        out.str("rope.scaling.type", "linear");
        out.f32("rope.scaling.factor", factor);
    } else if (t == "llama3") {
        SYSLM_CHECK(s.family != HFFamily::Gpt2, c.name(), ": llama3 RoPE scaling without RoPE");
        const double factor = rope_param(c, r, "factor", 8.0, false);
        const double lo = rope_param(c, r, "low_freq_factor", 1.0, false);
        const double hi = rope_param(c, r, "high_freq_factor", 4.0, false);
        // llama.cpp reads original_max_position_embeddings from the top level (where transformers
        // < 5 never put it); transformers itself reads it from the scaling object. Take the
        // scaling object's value first, as transformers does.
        double orig = rope_param(c, r, "original_max_position_embeddings", 0, false);
        if (orig == 0) orig = c.number_or({"original_max_position_embeddings"}, 8192);
        SYSLM_CHECK(lo != hi, c.name(),
                    ": llama3 RoPE scaling needs low_freq_factor != high_freq_factor");
        s.rope_freqs = llama3_rope_factors(r.theta, s.head_dim, factor, lo, hi, orig);
    } else if (t == "yarn") {
        const double factor = rope_param(c, r, "factor", 1.0, true);
        SYSLM_CHECK(factor >= 1, c.name(), ": yarn scaling factor must be >= 1");
        for (const char* k : {"mscale", "mscale_all_dim"})
            SYSLM_CHECK(!(r.p && r.p->contains(k) && !(*r.p)[k].is_null()), c.name(), ": yarn '", k,
                        "' (DeepSeek-style) is not supported");
        double orig = rope_param(c, r, "original_max_position_embeddings", 0, false);
        if (orig == 0) orig = static_cast<double>(s.n_ctx);
        out.str("rope.scaling.type", "yarn");
        out.f32("rope.scaling.factor", factor);
        out.u32("rope.scaling.original_context_length", static_cast<int64_t>(orig));
        // transformers' attention_factor is the full cos/sin magnitude; llama.cpp multiplies its
        // attn_factor by 1 + 0.1 ln(factor) itself, so store the ratio (absent = transformers'
        // default, which equals llama.cpp's built-in term).
        const double att = rope_param(c, r, "attention_factor", 0, false);
        if (att != 0) out.f32("rope.scaling.attn_factor", att / (1.0 + 0.1 * std::log(factor)));
        const double bf = rope_param(c, r, "beta_fast", 0, false);
        const double bs = rope_param(c, r, "beta_slow", 0, false);
        if (bf != 0) out.f32("rope.scaling.yarn_beta_fast", bf);
        if (bs != 0) out.f32("rope.scaling.yarn_beta_slow", bs);
    } else {
        fail(c.name(), ": RoPE scaling type '", t,
             "' is not supported (supported: linear, llama3, yarn)");
    }
}

void check_activation(const Config& c, const char* key, std::initializer_list<const char*> ok) {
    const std::string act = c.string_or(key, *ok.begin());
    for (const char* a : ok)
        if (act == a) return;
    fail(c.name(), ": ", key, " '", act, "' is not supported for ", c.string_or("model_type", "?"),
         " (expected ", *ok.begin(), ")");
}

// Widths, depth, heads and the head size of config.json's llama-style keys.
void read_llama_shape(const Config& c, HFModelSpec& s) {
    s.n_vocab = c.pos_int({"vocab_size"});
    s.n_embd = c.pos_int({"hidden_size"});
    s.n_layer = c.pos_int({"num_hidden_layers"});
    s.n_head = c.pos_int({"num_attention_heads"});
    s.n_head_kv = c.pos_int_or({"num_key_value_heads"}, s.n_head);
    s.n_ff = c.pos_int({"intermediate_size"});
    s.n_ctx = c.pos_int({"max_position_embeddings"});
    SYSLM_CHECK(s.n_head % s.n_head_kv == 0, c.name(), ": num_attention_heads ", s.n_head,
                " is not a multiple of num_key_value_heads ", s.n_head_kv);
    if (c.has("head_dim")) {
        s.head_dim = c.pos_int({"head_dim"});
    } else {
        SYSLM_CHECK(s.n_embd % s.n_head == 0, c.name(), ": hidden_size ", s.n_embd,
                    " is not a multiple of num_attention_heads ", s.n_head);
        s.head_dim = s.n_embd / s.n_head;
    }
    SYSLM_CHECK(s.head_dim % 2 == 0, c.name(), ": head_dim ", s.head_dim, " must be even for RoPE");
}

void read_llama_like(const Config& c, HFModelSpec& s) {
    read_llama_shape(c, s);
    s.tied_embeddings = c.boolean_or("tie_word_embeddings", false);
    check_activation(c, "hidden_act", {"silu", "swish"});
    SYSLM_CHECK(c.number_or({"pretraining_tp"}, 1) == 1, c.name(),
                ": pretraining_tp != 1 is not supported");
    SYSLM_CHECK(!c.has("partial_rotary_factor") || c.number({"partial_rotary_factor"}) == 1.0,
                c.name(), ": partial_rotary_factor != 1 is not supported");
}

// The keys llama.cpp's Model.set_gguf_parameters writes for every architecture, in its order.
void add_common_keys(const Config& c, const HFModelSpec& s, const RopeParams& rope, KVOut& out) {
    out.u32("block_count", s.n_layer);
    out.u32("context_length", s.n_ctx);
    out.u32("embedding_length", s.n_embd);
    out.u32("feed_forward_length", s.n_ff);
    out.u32("attention.head_count", s.n_head);
    if (c.has("num_key_value_heads")) out.u32("attention.head_count_kv", s.n_head_kv);
    out.f32("rope.freq_base", rope.theta);
    out.f32("attention.layer_norm_rms_epsilon", c.number({"rms_norm_eps"}));
    if (c.has("head_dim")) {
        out.u32("attention.key_length", s.head_dim);
        out.u32("attention.value_length", s.head_dim);
    }
}

// Qwen2 / Qwen3's per-layer attention (transformers' layer_types, or use_sliding_window with
// max_window_layers): the window and which layers it applies to, as
// attention.sliding_window and the per-layer bool array attention.sliding_window_pattern.
// transformers' layer_types (present): true for each "sliding_attention" layer.
std::vector<bool> sliding_layer_types(const Config& c, int64_t n_layer) {
    std::vector<bool> sliding(static_cast<size_t>(n_layer));
    const json& types = c.raw("layer_types");
    SYSLM_CHECK(types.is_array() && types.size() == sliding.size(), c.name(),
                ": layer_types must list one type per layer (", n_layer, ")");
    for (size_t il = 0; il < sliding.size(); ++il) {
        SYSLM_CHECK(types[il] == "full_attention" || types[il] == "sliding_attention", c.name(),
                    ": layer type ", types[il].dump(),
                    " is not supported (full_attention, sliding_attention)");
        sliding[il] = types[il] == "sliding_attention";
    }
    return sliding;
}

void add_sliding_window_layers(const Config& c, const HFModelSpec& s, KVOut& out) {
    std::vector<bool> local(static_cast<size_t>(s.n_layer), false);
    if (c.has("layer_types")) {
        local = sliding_layer_types(c, s.n_layer);
    } else if (c.boolean_or("use_sliding_window", false)) {
        const int64_t first = c.pos_int_or({"max_window_layers"}, 0);
        for (size_t il = 0; il < local.size(); ++il) local[il] = static_cast<int64_t>(il) >= first;
    }
    if (std::none_of(local.begin(), local.end(), [](bool b) { return b; })) return;
    SYSLM_CHECK(c.has("sliding_window") && c.raw("sliding_window").is_number_integer(), c.name(),
                ": sliding layers need an integer sliding_window");
    out.u32("attention.sliding_window", c.pos_int({"sliding_window"}));
    out.booleans("attention.sliding_window_pattern", local);
}

// Llama, Mistral and Mixtral (Llama's keys; Mixtral adds experts, Mistral a sliding window).
void parse_llama_family(const Config& c, HFModelSpec& s) {
    const std::string& a = s.hf_arch;
    s.arch = "llama";
    s.family = a == "MixtralForCausalLM" ? HFFamily::Mixtral : HFFamily::Llama;
    s.permute_qk = true;
    read_llama_like(c, s);
    s.qkv_bias = s.o_bias = c.boolean_or("attention_bias", false);
    s.mlp_bias = c.boolean_or("mlp_bias", false);
    SYSLM_CHECK(!(s.mlp_bias && s.family == HFFamily::Mixtral), c.name(),
                ": mlp_bias with experts is not supported");
    const RopeParams rope = read_rope(c);
    KVOut out{"llama.", s.kv};
    add_common_keys(c, s, rope, out);
    if (s.family == HFFamily::Mixtral) {
        s.n_expert = c.pos_int({"num_local_experts"});
        s.n_expert_used = c.pos_int({"num_experts_per_tok"});
        s.n_ff_exp = s.n_ff;
        out.u32("expert_count", s.n_expert);
        out.u32("expert_used_count", s.n_expert_used);
    }
    out.u32("vocab_size", s.n_vocab);
    out.u32("rope.dimension_count", s.head_dim);
    add_rope_scaling(c, rope, s, out);
    // Llama itself has no sliding window; Mistral/Mixtral store null when it is off.
    if ((a == "MistralForCausalLM" || a == "MixtralForCausalLM") && c.has("sliding_window"))
        out.u32("attention.sliding_window", c.pos_int({"sliding_window"}));
}

// Qwen2 and Qwen2-MoE (biased QKV; the MoE with shared experts), and Qwen3 and Qwen3-MoE (q and
// k normed per head, no QKV bias; the MoE without a shared expert).
void parse_qwen2_family(const Config& c, HFModelSpec& s) {
    const std::string& a = s.hf_arch;
    const bool qwen3 = a == "Qwen3ForCausalLM" || a == "Qwen3MoeForCausalLM";
    const bool moe = a == "Qwen2MoeForCausalLM" || a == "Qwen3MoeForCausalLM";
    s.arch = std::string(qwen3 ? "qwen3" : "qwen2") + (moe ? "moe" : "");
    s.family = qwen3 ? (moe ? HFFamily::Qwen3Moe : HFFamily::Qwen3)
                     : (moe ? HFFamily::Qwen2Moe : HFFamily::Qwen2);
    read_llama_like(c, s);
    if (qwen3) {  // llama.cpp's qwen3 graph has no Q/K/V biases
        SYSLM_CHECK(!c.boolean_or("attention_bias", false), c.name(),
                    ": attention_bias=true is not supported for Qwen3");
        s.qk_norm = true;
    } else {
        s.qkv_bias = c.boolean_or("qkv_bias", true);  // Qwen2 always has them; Qwen2-MoE says so
    }
    const RopeParams rope = read_rope(c);
    KVOut out{s.arch + ".", s.kv};
    add_common_keys(c, s, rope, out);
    if (moe) {
        s.n_expert = c.pos_int({"num_experts", "num_local_experts"});  // transformers 5: the latter
        s.n_expert_used = c.pos_int({"num_experts_per_tok"});
        s.n_ff_exp = c.pos_int({"moe_intermediate_size"});
        s.n_ff_shexp = c.pos_int_or({"shared_expert_intermediate_size"}, 0);
        SYSLM_CHECK(s.n_expert_used <= s.n_expert, c.name(), ": num_experts_per_tok ",
                    s.n_expert_used, " exceeds num_experts ", s.n_expert);
        SYSLM_CHECK(c.pos_int_or({"decoder_sparse_step"}, 1) == 1, c.name(),
                    ": decoder_sparse_step != 1 (dense layers between MoE layers) is not "
                    "supported");
        SYSLM_CHECK(!c.has("mlp_only_layers") || c.raw("mlp_only_layers").empty(), c.name(),
                    ": mlp_only_layers (dense layers in a MoE model) is not supported");
        SYSLM_CHECK(qwen3 || s.n_ff_shexp > 0, c.name(),
                    ": shared_expert_intermediate_size must be set for Qwen2-MoE");
        SYSLM_CHECK(!qwen3 || s.n_ff_shexp == 0, c.name(), ": Qwen3-MoE has no shared expert");
        out.u32("expert_count", s.n_expert);
        out.u32("expert_used_count", s.n_expert_used);
        out.u32("expert_feed_forward_length", s.n_ff_exp);
        if (!qwen3) out.u32("expert_shared_feed_forward_length", s.n_ff_shexp);
        // The key says what the model does where it differs from the architecture's default
        // (Qwen2-MoE: not renormalised; Qwen3-MoE: renormalised, which llama.cpp assumes).
        const bool renorm = c.boolean_or("norm_topk_prob", false);
        if (renorm != qwen3) out.boolean("expert_weights_norm", renorm);
    }
    out.u32("rope.dimension_count", s.head_dim);
    add_rope_scaling(c, rope, s, out);
    add_sliding_window_layers(c, s, out);
}

// Width, depth and heads of a multi-head (not grouped) attention model, under its own key names;
// the head size is width / heads.
void read_mha_shape(const Config& c, HFModelSpec& s, std::initializer_list<const char*> width,
                    std::initializer_list<const char*> depth,
                    std::initializer_list<const char*> heads) {
    s.n_embd = c.pos_int(width);
    s.n_layer = c.pos_int(depth);
    s.n_head = c.pos_int(heads);
    s.n_head_kv = s.n_head;
    SYSLM_CHECK(s.n_embd % s.n_head == 0, c.name(), ": ", *width.begin(), " ", s.n_embd,
                " is not a multiple of ", *heads.begin(), " ", s.n_head);
    s.head_dim = s.n_embd / s.n_head;
}

void parse_gpt2(const Config& c, HFModelSpec& s) {
    s.arch = "gpt2";
    s.family = HFFamily::Gpt2;
    s.n_vocab = c.pos_int({"vocab_size"});
    read_mha_shape(c, s, {"n_embd", "hidden_size"}, {"n_layer", "num_hidden_layers"},
                   {"n_head", "num_attention_heads"});
    s.n_ff = c.pos_int_or({"n_inner"}, 4 * s.n_embd);
    s.n_ctx = c.pos_int({"n_positions", "n_ctx", "max_position_embeddings"});
    s.tied_embeddings = c.boolean_or("tie_word_embeddings", true);
    check_activation(c, "activation_function", {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"});
    SYSLM_CHECK(!c.boolean_or("scale_attn_by_inverse_layer_idx", false), c.name(),
                ": scale_attn_by_inverse_layer_idx is not supported");
    SYSLM_CHECK(c.boolean_or("scale_attn_weights", true), c.name(),
                ": scale_attn_weights=false is not supported");
    KVOut out{"gpt2.", s.kv};
    out.u32("block_count", s.n_layer);
    out.u32("context_length", s.n_ctx);
    out.u32("embedding_length", s.n_embd);
    out.u32("feed_forward_length", s.n_ff);
    out.u32("attention.head_count", s.n_head);
    out.f32("attention.layer_norm_epsilon", c.number_or({"layer_norm_epsilon"}, 1e-5));
}

void parse_bloom(const Config& c, HFModelSpec& s) {
    s.arch = "bloom";
    s.family = HFFamily::Bloom;
    s.n_vocab = c.pos_int({"vocab_size"});
    read_mha_shape(c, s, {"hidden_size", "n_embed"}, {"n_layer", "num_hidden_layers"},
                   {"n_head", "num_attention_heads"});
    s.n_ff = 4 * s.n_embd;
    // ALiBi positions have no trained range: seq_length only bounds the context syslm allocates.
    s.n_ctx = c.pos_int_or({"seq_length", "n_positions", "max_position_embeddings"}, 2048);
    s.tied_embeddings = c.boolean_or("tie_word_embeddings", true);
    SYSLM_CHECK(!c.boolean_or("apply_residual_connection_post_layernorm", false), c.name(),
                ": apply_residual_connection_post_layernorm=true is not supported");
    KVOut out{"bloom.", s.kv};
    out.u32("context_length", s.n_ctx);
    out.u32("embedding_length", s.n_embd);
    out.u32("feed_forward_length", s.n_ff);
    out.u32("block_count", s.n_layer);
    out.u32("attention.head_count", s.n_head);
    out.u32("attention.head_count_kv", s.n_head);
    out.f32("attention.layer_norm_epsilon", c.number_or({"layer_norm_epsilon"}, 1e-5));
}

void parse_mpt(const Config& c, HFModelSpec& s) {
    s.arch = "mpt";
    s.family = HFFamily::Mpt;
    s.n_vocab = c.pos_int({"vocab_size"});
    read_mha_shape(c, s, {"d_model", "hidden_size"}, {"n_layers", "num_hidden_layers"},
                   {"n_heads", "num_attention_heads"});
    s.n_ff = c.pos_int_or({"expansion_ratio"}, 4) * s.n_embd;
    s.n_ctx = c.pos_int_or({"max_seq_len", "max_position_embeddings"}, 2048);
    s.tied_embeddings = true;  // MPT's head is its embedding
    SYSLM_CHECK(c.boolean_or("no_bias", true), c.name(), ": no_bias=false is not supported");
    const Config attn(c.has("attn_config") ? c.raw("attn_config") : json::object(),
                      c.name() + ": attn_config");
    SYSLM_CHECK(attn.boolean_or("alibi", false), attn.name(),
                ": alibi=false (no position information) is not supported");
    SYSLM_CHECK(!attn.boolean_or("qk_ln", false), attn.name(), ": qk_ln is not supported");
    SYSLM_CHECK(!attn.has("clip_qkv"), attn.name(), ": clip_qkv is not supported");
    SYSLM_CHECK(!attn.has("softmax_scale"), attn.name(),
                ": a softmax_scale other than 1/sqrt(head size) is not supported");
    KVOut out{"mpt.", s.kv};
    out.u32("context_length", s.n_ctx);
    out.u32("embedding_length", s.n_embd);
    out.u32("block_count", s.n_layer);
    out.u32("feed_forward_length", s.n_ff);
    out.u32("attention.head_count", s.n_head);
    out.f32("attention.layer_norm_epsilon", c.number_or({"layer_norm_epsilon"}, 1e-5));
    out.f32("attention.max_alibi_bias", attn.number_or({"alibi_bias_max"}, 8.0));
}

// Phi-3: llama's blocks with fused QKV and gate-up, NEOX RoPE, a sliding window on every layer
// (llama.cpp writes 0 for none), and LongRoPE: short and long per-pair frequency factors, with
// the attention factor transformers derives, as llama.cpp's Phi3MiniModel writes them.
void parse_phi3(const Config& c, HFModelSpec& s) {
    s.arch = "phi3";
    s.family = HFFamily::Phi3;
    read_llama_like(c, s);
    const RopeParams rope = read_rope(c);
    const double partial = rope_param(c, rope, "partial_rotary_factor", 1, false);
    SYSLM_CHECK(partial == 1.0, c.name(), ": partial_rotary_factor != 1 is not supported");
    const int64_t orig = static_cast<int64_t>(rope_param(
        c, rope, "original_max_position_embeddings",
        c.number_or({"original_max_position_embeddings"}, static_cast<double>(s.n_ctx)), false));
    KVOut out{"phi3.", s.kv};
    out.u32("context_length", s.n_ctx);
    out.u32("rope.scaling.original_context_length", orig);
    out.u32("embedding_length", s.n_embd);
    out.u32("feed_forward_length", s.n_ff);
    out.u32("block_count", s.n_layer);
    out.u32("attention.head_count", s.n_head);
    out.u32("attention.head_count_kv", s.n_head_kv);
    out.f32("attention.layer_norm_rms_epsilon", c.number({"rms_norm_eps"}));
    out.u32("rope.dimension_count", s.head_dim);
    out.f32("rope.freq_base", rope.theta);
    out.u32("attention.sliding_window",
            c.has("sliding_window") ? c.pos_int({"sliding_window"}) : 0);
    if (rope.type == "default") return;
    SYSLM_CHECK(rope.type == "longrope" || rope.type == "su", c.name(), ": RoPE scaling '",
                rope.type, "' is not supported for Phi-3 (longrope)");
    auto factors = [&](const char* key) {
        SYSLM_CHECK(rope.p->contains(key) && (*rope.p)[key].is_array() &&
                        static_cast<int64_t>((*rope.p)[key].size()) == s.head_dim / 2,
                    c.name(), ": longrope needs ", key, " with ", s.head_dim / 2, " numbers");
        std::vector<float> v;
        for (const json& x : (*rope.p)[key])
            v.push_back(static_cast<float>(c.check_number(x, key)));
        return v;
    };
    s.rope_factors_long = factors("long_factor");
    s.rope_factors_short = factors("short_factor");
    // transformers: factor (else max / original positions), then sqrt(1 + ln f / ln original).
    const double factor = rope_param(c, rope, "factor", double(s.n_ctx) / double(orig), false);
    double attn = rope_param(c, rope, "attention_factor", 0, false);
    if (attn == 0)
        attn = factor <= 1 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(double(orig)));
    out.f32("rope.scaling.attn_factor", attn);
}

// Gemma 2 and Gemma 3 (text): GeGLU, norms after the attention and the FFN, embeddings scaled
// by sqrt(hidden), local layers (layer_types, or the older sliding_window_pattern period: 2 for
// Gemma 2, 6 for Gemma 3) and a score scale of query_pre_attn_scalar^-1/2. Gemma 2 soft-caps the
// attention scores and the logits; Gemma 3 norms q and k per head and gives its local layers
// their own RoPE base. Norm weights are stored as 1 + w (plan_gemma), as llama.cpp does.
void parse_gemma(const Config& c, HFModelSpec& s, int generation) {
    const bool g3 = generation == 3;
    s.arch = g3 ? "gemma3" : "gemma2";
    s.family = g3 ? HFFamily::Gemma3 : HFFamily::Gemma2;
    read_llama_shape(c, s);
    s.qk_norm = g3;
    s.tied_embeddings = c.boolean_or("tie_word_embeddings", true);
    check_activation(c, "hidden_activation", {"gelu_pytorch_tanh", "gelu_new"});
    SYSLM_CHECK(!(g3 && c.has("attn_logit_softcapping")), c.name(),
                ": attn_logit_softcapping is not supported for Gemma 3 (llama.cpp neither)");
    SYSLM_CHECK(!c.boolean_or("use_bidirectional_attention", false), c.name(),
                ": use_bidirectional_attention is not supported");
    SYSLM_CHECK(!c.boolean_or("attention_bias", false), c.name(),
                ": attention_bias=true is not supported for Gemma");
    // RoPE: transformers >= 5 keeps Gemma 3's parameters per layer type; older configs (and
    // Gemma 2) keep rope_theta / rope_scaling for the global layers and rope_local_base_freq
    // for the local ones.
    RopeParams global, local;
    local.theta = 10000.0;
    const json* per_type = c.has("rope_parameters") && c.raw("rope_parameters").is_object() &&
                                   c.raw("rope_parameters").contains("full_attention")
                               ? &c.raw("rope_parameters")
                               : nullptr;
    if (per_type) {
        auto read = [&](const char* type, RopeParams& r) {
            if (!per_type->contains(type)) return;
            const json& p = (*per_type)[type];
            SYSLM_CHECK(p.is_object(), c.name(), ": rope_parameters.", type, " must be an object");
            r.p = &p;
            if (p.contains("rope_type") && p["rope_type"].is_string())
                r.type = p["rope_type"].get<std::string>();
            if (p.contains("rope_theta") && !p["rope_theta"].is_null())
                r.theta = c.check_number(p["rope_theta"], "rope_theta");
        };
        global.theta = g3 ? 1000000.0 : 10000.0;
        read("full_attention", global);
        read("sliding_attention", local);
    } else {
        global = read_rope(c);
        if (g3 && !c.has("rope_theta") && !c.has("rope_parameters")) global.theta = 1000000.0;
        local.theta = c.number_or({"rope_local_base_freq"}, g3 ? 10000.0 : global.theta);
    }
    SYSLM_CHECK(global.theta > 0 && local.theta > 0, c.name(), ": RoPE bases must be positive");
    SYSLM_CHECK(local.type == "default", c.name(), ": RoPE scaling '", local.type,
                "' of the sliding layers is not supported");
    SYSLM_CHECK(g3 || local.theta == global.theta, c.name(),
                ": Gemma 2 with a separate local RoPE base is not supported");
    KVOut out{s.arch + ".", s.kv};
    out.u32("context_length", c.pos_int_or({"max_position_embeddings"}, 131072));
    out.u32("embedding_length", s.n_embd);
    out.u32("block_count", s.n_layer);
    out.u32("feed_forward_length", s.n_ff);
    out.u32("attention.head_count", s.n_head);
    out.f32("attention.layer_norm_rms_epsilon", c.number_or({"rms_norm_eps"}, 1e-6));
    out.u32("attention.key_length", s.head_dim);
    out.u32("attention.value_length", s.head_dim);
    out.f32("rope.freq_base", global.theta);
    out.u32("attention.head_count_kv", s.n_head_kv);
    add_rope_scaling(c, global, s, out);
    if (g3) out.f32("rope.freq_base_swa", local.theta);
    out.f32("attention.scale", 1.0 / std::sqrt(c.number_or({"query_pre_attn_scalar"}, 256)));
    // Absent (null) caps are 0, syslm's "none"; llama.cpp's gemma2 assumes 50 and 30 without
    // the keys and divides by zero with 0.
    if (!g3 || c.has("final_logit_softcapping"))
        out.f32("final_logit_softcapping", c.number_or({"final_logit_softcapping"}, 0));
    if (!g3) out.f32("attn_logit_softcapping", c.number_or({"attn_logit_softcapping"}, 0));
    std::vector<bool> sliding(static_cast<size_t>(s.n_layer));
    if (c.has("layer_types")) {
        sliding = sliding_layer_types(c, s.n_layer);
    } else {
        const int64_t n = c.pos_int_or({"sliding_window_pattern"}, g3 ? 6 : 2);
        for (size_t il = 0; il < sliding.size(); ++il) sliding[il] = (il + 1) % n != 0;
    }
    if (std::any_of(sliding.begin(), sliding.end(), [](bool b) { return b; })) {
        out.u32("attention.sliding_window", c.pos_int({"sliding_window"}));
        out.booleans("attention.sliding_window_pattern", sliding);
    }
}

// Gemma3ForConditionalGeneration (Gemma 3 4B and larger): the language model of text_config,
// whose absent keys take Gemma3TextConfig's defaults (released configs list only what differs),
// under `language_model.`; the vision tower and projector are left out.
void parse_gemma3_multimodal(const Config& c, HFModelSpec& s) {
    SYSLM_CHECK(c.has("text_config") && c.raw("text_config").is_object(), c.name(),
                ": Gemma3ForConditionalGeneration needs a text_config object");
    json text = {{"vocab_size", 262208},
                 {"hidden_size", 2304},
                 {"intermediate_size", 9216},
                 {"num_hidden_layers", 26},
                 {"num_attention_heads", 8},
                 {"num_key_value_heads", 4},
                 {"head_dim", 256},
                 {"hidden_activation", "gelu_pytorch_tanh"},
                 {"max_position_embeddings", 131072},
                 {"rms_norm_eps", 1e-6},
                 {"query_pre_attn_scalar", 256},
                 {"sliding_window", 4096},
                 {"tie_word_embeddings", c.boolean_or("tie_word_embeddings", true)}};
    for (const auto& [k, v] : c.raw("text_config").items())
        if (!v.is_null()) text[k] = v;
    parse_gemma(Config(std::move(text), c.name() + ": text_config"), s, 3);
    s.tensor_prefix = "language_model.";
    s.ignored_prefixes = {"vision_tower.", "multi_modal_projector."};
}

HFModelSpec parse_config(const Config& c) {
    HFModelSpec s;
    SYSLM_CHECK(c.has("architectures") && c.raw("architectures").is_array() &&
                    !c.raw("architectures").empty() && c.raw("architectures")[0].is_string(),
                c.name(), ": missing \"architectures\" (e.g. [\"LlamaForCausalLM\"])");
    s.hf_arch = c.raw("architectures")[0].get<std::string>();
    const std::string& a = s.hf_arch;
    if (a == "LlamaForCausalLM" || a == "LLaMAForCausalLM" || a == "MistralForCausalLM" ||
        a == "MixtralForCausalLM")
        parse_llama_family(c, s);
    else if (a == "Qwen2ForCausalLM" || a == "Qwen2MoeForCausalLM" || a == "Qwen3ForCausalLM" ||
             a == "Qwen3MoeForCausalLM")
        parse_qwen2_family(c, s);
    else if (a == "GPT2LMHeadModel")
        parse_gpt2(c, s);
    else if (a == "BloomForCausalLM")
        parse_bloom(c, s);
    else if (a == "MptForCausalLM")
        parse_mpt(c, s);
    else if (a == "Phi3ForCausalLM")
        parse_phi3(c, s);
    else if (a == "Gemma2ForCausalLM")
        parse_gemma(c, s, 2);
    else if (a == "Gemma3ForCausalLM")
        parse_gemma(c, s, 3);
    else if (a == "Gemma3ForConditionalGeneration")
        parse_gemma3_multimodal(c, s);
    else
        fail(c.name(), ": architecture '", a,
             "' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
             "MixtralForCausalLM, Qwen2ForCausalLM, Qwen2MoeForCausalLM, Qwen3ForCausalLM, "
             "Qwen3MoeForCausalLM, GPT2LMHeadModel, BloomForCausalLM, MptForCausalLM, "
             "Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
             "Gemma3ForConditionalGeneration)");
    return s;
}

}  // namespace

std::vector<float> llama3_rope_factors(double base, int64_t head_dim, double factor,
                                       double low_freq_factor, double high_freq_factor,
                                       double original_context) {
    // Mirrors the float32 torch arithmetic of llama.cpp's converter so the tensor is the same.
    const float pi2 = static_cast<float>(2 * std::numbers::pi);
    const float low_wavelen = static_cast<float>(original_context / low_freq_factor);
    const float high_wavelen = static_cast<float>(original_context / high_freq_factor);
    std::vector<float> out;
    for (int64_t i = 0; i < head_dim; i += 2) {
        const float e = static_cast<float>(i) / static_cast<float>(head_dim);
        const float freq = 1.0f / std::pow(static_cast<float>(base), e);
        const float wavelen = pi2 / freq;
        if (wavelen < high_wavelen) {
            out.push_back(1.0f);
        } else if (wavelen > low_wavelen) {
            out.push_back(static_cast<float>(factor));
        } else {
            const float smooth = (static_cast<float>(original_context) / wavelen -
                                  static_cast<float>(low_freq_factor)) /
                                 static_cast<float>(high_freq_factor - low_freq_factor);
            out.push_back(1.0f / ((1.0f - smooth) / static_cast<float>(factor) + smooth));
        }
    }
    return out;
}

HFModelSpec parse_hf_config(std::string_view config_json, const std::string& name) {
    json j;
    try {
        j = json::parse(config_json);
    } catch (const json::exception& e) {
        fail(name, ": not valid JSON: ", e.what());
    }
    SYSLM_CHECK(j.is_object(), name, ": must be a JSON object");
    try {
        return parse_config(Config(std::move(j), name));
    } catch (const json::exception& e) {
        // A value of the wrong JSON type somewhere the typed accessors did not look.
        fail(name, ": unexpected structure: ", e.what());
    }
}

HFModelSpec read_hf_config(const std::string& model_dir) {
    const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
    std::ifstream in(path, std::ios::binary);
    SYSLM_CHECK(in, path, ": cannot open (is ", model_dir, " a Hugging Face model folder?)");
    std::ostringstream ss;
    ss << in.rdbuf();
    return parse_hf_config(ss.str(), path);
}

}  // namespace syslm::io
