// config.json -> GGUF hyper-parameters. The expected keys are llama.cpp's (gguf-py constants.py);
// the llama3 factors are checked against transformers' formula evaluated in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "core/error.hpp"
#include "io/hf_config.hpp"

namespace syslm::io {
namespace {

const GGUFValue* kv(const HFModelSpec& s, const std::string& key) {
    for (const auto& [k, v] : s.kv)
        if (k == key) return &v;
    return nullptr;
}

std::string error_of(const std::string& json) {
    try {
        parse_hf_config(json, "cfg.json");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// transformers 4.x Llama config with GQA and linear scaling.
const char* kLlamaV4 = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 72, "intermediate_size": 104,
  "num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 2,
  "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 50000.0,
  "rope_scaling": {"type": "linear", "factor": 2.5}, "vocab_size": 560, "hidden_act": "silu",
  "tie_word_embeddings": false})";

TEST(HFConfig, LlamaKeysV4) {
    const HFModelSpec s = parse_hf_config(kLlamaV4, "cfg.json");
    EXPECT_EQ(s.arch, "llama");
    EXPECT_TRUE(s.permute_qk);
    EXPECT_EQ(s.head_dim, 12);
    EXPECT_EQ(kv(s, "llama.block_count")->as_u32(), 3u);
    EXPECT_EQ(kv(s, "llama.context_length")->as_u32(), 256u);
    EXPECT_EQ(kv(s, "llama.embedding_length")->as_u32(), 72u);
    EXPECT_EQ(kv(s, "llama.feed_forward_length")->as_u32(), 104u);
    EXPECT_EQ(kv(s, "llama.attention.head_count")->as_u32(), 6u);
    EXPECT_EQ(kv(s, "llama.attention.head_count_kv")->as_u32(), 2u);
    EXPECT_EQ(kv(s, "llama.attention.head_count_kv")->type(), GGUFType::U32);
    EXPECT_FLOAT_EQ(kv(s, "llama.attention.layer_norm_rms_epsilon")->as_f32(), 1e-5f);
    EXPECT_EQ(kv(s, "llama.attention.layer_norm_rms_epsilon")->type(), GGUFType::F32);
    EXPECT_FLOAT_EQ(kv(s, "llama.rope.freq_base")->as_f32(), 50000.0f);
    EXPECT_EQ(kv(s, "llama.rope.dimension_count")->as_u32(), 12u);
    EXPECT_EQ(kv(s, "llama.vocab_size")->as_u32(), 560u);
    EXPECT_EQ(kv(s, "llama.rope.scaling.type")->as_string(), "linear");
    EXPECT_FLOAT_EQ(kv(s, "llama.rope.scaling.factor")->as_f32(), 2.5f);
    EXPECT_EQ(kv(s, "llama.attention.key_length"), nullptr);  // no head_dim in config.json
    EXPECT_EQ(kv(s, "llama.attention.sliding_window"), nullptr);
    EXPECT_TRUE(s.rope_freqs.empty());
}

TEST(HFConfig, MistralV5SlidingWindowAndRopeParameters) {
    const HFModelSpec s = parse_hf_config(R"({
      "architectures": ["MistralForCausalLM"], "hidden_size": 72, "intermediate_size": 104,
      "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 12,
      "max_position_embeddings": 128, "rms_norm_eps": 1e-06, "sliding_window": 7,
      "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "vocab_size": 300})",
                                          "cfg.json");
    EXPECT_EQ(s.arch, "llama");
    EXPECT_EQ(kv(s, "llama.attention.sliding_window")->as_u32(), 7u);
    EXPECT_FLOAT_EQ(kv(s, "llama.rope.freq_base")->as_f32(), 1e6f);
    EXPECT_EQ(kv(s, "llama.attention.key_length")->as_u32(), 12u);
    EXPECT_EQ(kv(s, "llama.attention.value_length")->as_u32(), 12u);
    EXPECT_EQ(kv(s, "llama.rope.scaling.type"), nullptr);
}

TEST(HFConfig, MixtralExperts) {
    const HFModelSpec s = parse_hf_config(R"({
      "architectures": ["MixtralForCausalLM"], "hidden_size": 72, "intermediate_size": 104,
      "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": null,
      "max_position_embeddings": 128, "rms_norm_eps": 1e-05, "sliding_window": null,
      "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 300})",
                                          "cfg.json");
    EXPECT_EQ(s.n_expert, 4);
    EXPECT_EQ(s.n_ff_exp, 104);
    EXPECT_EQ(kv(s, "llama.expert_count")->as_u32(), 4u);
    EXPECT_EQ(kv(s, "llama.expert_used_count")->as_u32(), 2u);
    EXPECT_EQ(kv(s, "llama.attention.sliding_window"), nullptr);
}

TEST(HFConfig, Qwen2MoeKeys) {
    const HFModelSpec s = parse_hf_config(R"({
      "architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 72, "intermediate_size": 104,
      "moe_intermediate_size": 40, "shared_expert_intermediate_size": 88, "num_experts": 4,
      "num_experts_per_tok": 2, "norm_topk_prob": true, "num_hidden_layers": 2,
      "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 256,
      "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "vocab_size": 483, "use_sliding_window": false,
      "decoder_sparse_step": 1, "mlp_only_layers": []})",
                                          "cfg.json");
    EXPECT_EQ(s.arch, "qwen2moe");
    EXPECT_FALSE(s.permute_qk);
    EXPECT_TRUE(s.qkv_bias);
    EXPECT_EQ(kv(s, "qwen2moe.expert_count")->as_u32(), 4u);
    EXPECT_EQ(kv(s, "qwen2moe.expert_used_count")->as_u32(), 2u);
    EXPECT_EQ(kv(s, "qwen2moe.expert_feed_forward_length")->as_u32(), 40u);
    EXPECT_EQ(kv(s, "qwen2moe.expert_shared_feed_forward_length")->as_u32(), 88u);
    EXPECT_TRUE(kv(s, "qwen2moe.expert_weights_norm")->as_bool());
}

TEST(HFConfig, Gpt2) {
    const HFModelSpec s = parse_hf_config(R"({
      "architectures": ["GPT2LMHeadModel"], "n_embd": 72, "n_head": 6, "n_layer": 3,
      "n_positions": 96, "n_inner": null, "vocab_size": 450, "layer_norm_epsilon": 1e-05,
      "activation_function": "gelu_new"})",
                                          "cfg.json");
    EXPECT_EQ(s.arch, "gpt2");
    EXPECT_EQ(s.n_ff, 288);  // 4 * n_embd when n_inner is null
    EXPECT_TRUE(s.tied_embeddings);
    EXPECT_EQ(kv(s, "gpt2.context_length")->as_u32(), 96u);
    EXPECT_EQ(kv(s, "gpt2.feed_forward_length")->as_u32(), 288u);
    EXPECT_FLOAT_EQ(kv(s, "gpt2.attention.layer_norm_epsilon")->as_f32(), 1e-5f);
    EXPECT_EQ(kv(s, "gpt2.rope.freq_base"), nullptr);
}

TEST(HFConfig, YarnKeys) {
    const HFModelSpec s = parse_hf_config(R"({
      "architectures": ["Qwen2ForCausalLM"], "hidden_size": 72, "intermediate_size": 104,
      "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
      "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "vocab_size": 300,
      "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                          "original_max_position_embeddings": 1024, "attention_factor": 1.5,
                          "beta_fast": 16, "beta_slow": 2}})",
                                          "cfg.json");
    EXPECT_EQ(kv(s, "qwen2.rope.scaling.type")->as_string(), "yarn");
    EXPECT_FLOAT_EQ(kv(s, "qwen2.rope.scaling.factor")->as_f32(), 4.0f);
    EXPECT_EQ(kv(s, "qwen2.rope.scaling.original_context_length")->as_u32(), 1024u);
    // llama.cpp multiplies attn_factor by 1 + 0.1 ln(factor) itself.
    EXPECT_FLOAT_EQ(kv(s, "qwen2.rope.scaling.attn_factor")->as_f32(),
                    static_cast<float>(1.5 / (1 + 0.1 * std::log(4.0))));
    EXPECT_FLOAT_EQ(kv(s, "qwen2.rope.scaling.yarn_beta_fast")->as_f32(), 16.0f);
    EXPECT_FLOAT_EQ(kv(s, "qwen2.rope.scaling.yarn_beta_slow")->as_f32(), 2.0f);
}

// transformers' _compute_llama3_parameters, in double: the ratio default / scaled inverse
// frequency.
std::vector<double> hf_llama3(double base, int dim, double factor, double lo, double hi,
                              double orig) {
    std::vector<double> out;
    const double low_wl = orig / lo, high_wl = orig / hi;
    for (int i = 0; i < dim; i += 2) {
        const double inv = 1.0 / std::pow(base, static_cast<double>(i) / dim);
        const double wl = 2 * std::numbers::pi / inv;
        double scaled = wl > low_wl ? inv / factor : inv;
        const double smooth = (orig / wl - lo) / (hi - lo);
        if (!(wl < high_wl) && !(wl > low_wl)) scaled = (1 - smooth) * inv / factor + smooth * inv;
        out.push_back(inv / scaled);
    }
    return out;
}

TEST(HFConfig, Llama3RopeFactors) {
    const HFModelSpec s = parse_hf_config(R"({
      "architectures": ["LlamaForCausalLM"], "hidden_size": 192, "intermediate_size": 104,
      "num_hidden_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 1,
      "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "vocab_size": 300,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
      "rope_theta": 500000.0})",
                                          "cfg.json");
    const auto want = hf_llama3(500000.0, 64, 8.0, 1.0, 4.0, 64);
    ASSERT_EQ(s.rope_freqs.size(), want.size());
    int n1 = 0, n8 = 0, mid = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(s.rope_freqs[i], want[i], 2e-6 * want[i]) << i;
        n1 += want[i] == 1.0;
        n8 += want[i] == 8.0;
        mid += want[i] > 1.0 && want[i] < 8.0;
    }
    EXPECT_GT(n1, 0);  // all three regimes are exercised
    EXPECT_GT(n8, 0);
    EXPECT_GT(mid, 0);
    EXPECT_EQ(kv(s, "llama.rope.scaling.type"), nullptr);  // llama3 is the tensor only
}

// Gemma 3 4B's released config.json (transformers 4.50): a multimodal checkpoint whose
// text_config lists only what differs from Gemma3TextConfig's defaults, old-style rope_scaling.
TEST(HFConfig, Gemma3MultimodalTakesTheTextConfigDefaults) {
    const HFModelSpec s = parse_hf_config(R"({
      "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
      "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                      "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                      "sliding_window": 1024},
      "vision_config": {"hidden_size": 1152, "image_size": 896, "model_type": "siglip_vision_model"}})",
                                          "cfg.json");
    EXPECT_EQ(s.arch, "gemma3");
    EXPECT_EQ(s.tensor_prefix, "language_model.");
    EXPECT_EQ(s.n_vocab, 262208);
    EXPECT_EQ(s.n_head, 8);
    EXPECT_EQ(s.n_head_kv, 4);
    EXPECT_EQ(s.head_dim, 256);
    EXPECT_TRUE(s.tied_embeddings);
    EXPECT_EQ(kv(s, "gemma3.context_length")->as_u32(), 131072u);
    EXPECT_EQ(kv(s, "gemma3.block_count")->as_u32(), 34u);
    EXPECT_FLOAT_EQ(kv(s, "gemma3.rope.freq_base")->as_f32(), 1e6f);
    EXPECT_FLOAT_EQ(kv(s, "gemma3.rope.freq_base_swa")->as_f32(), 1e4f);
    EXPECT_EQ(kv(s, "gemma3.rope.scaling.type")->as_string(), "linear");
    EXPECT_FLOAT_EQ(kv(s, "gemma3.rope.scaling.factor")->as_f32(), 8.0f);
    EXPECT_FLOAT_EQ(kv(s, "gemma3.attention.scale")->as_f32(), 1.0f / 16);
    EXPECT_FLOAT_EQ(kv(s, "gemma3.attention.layer_norm_rms_epsilon")->as_f32(), 1e-6f);
    EXPECT_EQ(kv(s, "gemma3.attention.sliding_window")->as_u32(), 1024u);
    const GGUFValue* pattern = kv(s, "gemma3.attention.sliding_window_pattern");
    ASSERT_NE(pattern, nullptr);
    ASSERT_EQ(pattern->size(), 34u);
    pattern->for_each_item([](size_t il, const GGUFValue& v) {
        EXPECT_EQ(v.as_bool(), il % 6 != 5) << il;  // every sixth layer global
    });
    EXPECT_EQ(kv(s, "gemma3.final_logit_softcapping"), nullptr);
}

// Gemma 2's transformers 4.x config: no layer_types, so even layers local; both caps written.
TEST(HFConfig, Gemma2PeriodTwoAndSoftcaps) {
    const HFModelSpec s = parse_hf_config(R"({
      "architectures": ["Gemma2ForCausalLM"], "vocab_size": 256000, "hidden_size": 2304,
      "intermediate_size": 9216, "num_hidden_layers": 4, "num_attention_heads": 8,
      "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 8192,
      "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "query_pre_attn_scalar": 224,
      "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
      "hidden_activation": "gelu_pytorch_tanh"})",
                                          "cfg.json");
    EXPECT_EQ(s.arch, "gemma2");
    EXPECT_FALSE(s.qk_norm);
    EXPECT_FLOAT_EQ(kv(s, "gemma2.attn_logit_softcapping")->as_f32(), 50.0f);
    EXPECT_FLOAT_EQ(kv(s, "gemma2.final_logit_softcapping")->as_f32(), 30.0f);
    EXPECT_FLOAT_EQ(kv(s, "gemma2.attention.scale")->as_f32(), 1.0f / std::sqrt(224.0f));
    EXPECT_EQ(kv(s, "gemma2.rope.freq_base_swa"), nullptr);
    const GGUFValue* pattern = kv(s, "gemma2.attention.sliding_window_pattern");
    ASSERT_NE(pattern, nullptr);
    pattern->for_each_item(
        [](size_t il, const GGUFValue& v) { EXPECT_EQ(v.as_bool(), il % 2 == 0); });
}

// Phi-3 mini 128k's config (transformers 4.x): LongRoPE's factors and llama.cpp's attention
// factor sqrt(1 + ln(131072 / 4096) / ln(4096)).
TEST(HFConfig, Phi3LongRope) {
    std::string shortf = "[", longf = "[";
    for (int i = 0; i < 48; ++i) {
        shortf += std::to_string(1.0 + 0.01 * i) + (i < 47 ? "," : "]");
        longf += std::to_string(1.0 + 0.5 * i) + (i < 47 ? "," : "]");
    }
    const HFModelSpec s = parse_hf_config(R"({
      "architectures": ["Phi3ForCausalLM"], "vocab_size": 32064, "hidden_size": 3072,
      "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 32, "max_position_embeddings": 131072,
      "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
      "sliding_window": 262144, "hidden_act": "silu",
      "rope_scaling": {"type": "longrope", "short_factor": )" +
                                              shortf + R"(, "long_factor": )" + longf + "}}",
                                          "cfg.json");
    EXPECT_EQ(s.arch, "phi3");
    ASSERT_EQ(s.rope_factors_long.size(), 48u);
    ASSERT_EQ(s.rope_factors_short.size(), 48u);
    EXPECT_FLOAT_EQ(s.rope_factors_long[47], 24.5f);
    EXPECT_FLOAT_EQ(s.rope_factors_short[47], 1.47f);
    EXPECT_EQ(kv(s, "phi3.rope.scaling.original_context_length")->as_u32(), 4096u);
    EXPECT_EQ(kv(s, "phi3.context_length")->as_u32(), 131072u);
    EXPECT_EQ(kv(s, "phi3.attention.sliding_window")->as_u32(), 262144u);
    EXPECT_FLOAT_EQ(kv(s, "phi3.rope.scaling.attn_factor")->as_f32(),
                    static_cast<float>(std::sqrt(1 + std::log(32.0) / std::log(4096.0))));
}

TEST(HFConfig, Errors) {
    EXPECT_NE(error_of(R"({"architectures": ["FalconForCausalLM"]})")
                  .find("'FalconForCausalLM' is not supported"),
              std::string::npos);
    EXPECT_NE(error_of(R"({"hidden_size": 4})").find("architectures"), std::string::npos);
    EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
    std::string cfg = kLlamaV4;
    auto with = [&](const std::string& from, const std::string& to) {
        std::string c = cfg;
        c.replace(c.find(from), from.size(), to);
        return error_of(c);
    };
    EXPECT_NE(with(R"("hidden_act": "silu")", R"("hidden_act": "gelu")").find("hidden_act 'gelu'"),
              std::string::npos);
    EXPECT_NE(
        with(R"("num_key_value_heads": 2)", R"("num_key_value_heads": 4)").find("not a multiple"),
        std::string::npos);
    EXPECT_NE(with(R"("intermediate_size": 104,)", "").find("missing intermediate_size"),
              std::string::npos);
    EXPECT_NE(with(R"("hidden_size": 72)", R"("hidden_size": -72)")
                  .find("hidden_size must be a positive integer"),
              std::string::npos);
    EXPECT_NE(
        with(R"("type": "linear")", R"("type": "dynamic")").find("'dynamic' is not supported"),
        std::string::npos);
    const std::string e = error_of(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 72,
      "intermediate_size": 104, "num_hidden_layers": 2, "num_attention_heads": 6,
      "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "vocab_size": 9, "use_sliding_window": true})");
    // Sliding layers (use_sliding_window, or layer_types) without a window to slide.
    EXPECT_NE(e.find("need an integer sliding_window"), std::string::npos) << e;
    EXPECT_NE(e.find("cfg.json"), std::string::npos) << e;
}

}  // namespace
}  // namespace syslm::io
