// HF -> GGUF tensor planning: names (gguf-py tensor_mapping.py), shapes, transforms and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "core/error.hpp"
#include "io/hf_config.hpp"
#include "io/hf_tensor_names.hpp"

namespace syslm::io {
namespace {

HFModelSpec llama_spec(int64_t n_expert = 0) {
    HFModelSpec s;
    s.arch = "llama";
    s.family = n_expert ? HFFamily::Mixtral : HFFamily::Llama;
    s.n_vocab = 50, s.n_embd = 72, s.n_layer = 2, s.n_head = 6, s.n_head_kv = 2, s.head_dim = 12;
    s.n_ff = 104, s.n_ctx = 64, s.n_expert = n_expert, s.n_ff_exp = n_expert ? 104 : 0;
    s.permute_qk = true;
    return s;
}

HFShapes llama_shapes(const HFModelSpec& s, bool lm_head = true) {
    HFShapes sh;
    sh["model.embed_tokens.weight"] = {s.n_vocab, s.n_embd};
    sh["model.norm.weight"] = {s.n_embd};
    if (lm_head) sh["lm_head.weight"] = {s.n_vocab, s.n_embd};
    for (int i = 0; i < s.n_layer; ++i) {
        const std::string L = "model.layers." + std::to_string(i) + ".";
        sh[L + "input_layernorm.weight"] = {s.n_embd};
        sh[L + "post_attention_layernorm.weight"] = {s.n_embd};
        sh[L + "self_attn.q_proj.weight"] = {72, 72};
        sh[L + "self_attn.k_proj.weight"] = {24, 72};
        sh[L + "self_attn.v_proj.weight"] = {24, 72};
        sh[L + "self_attn.o_proj.weight"] = {72, 72};
        if (s.n_expert) {
            sh[L + "block_sparse_moe.gate.weight"] = {s.n_expert, 72};
            for (int e = 0; e < s.n_expert; ++e) {
                const std::string E = L + "block_sparse_moe.experts." + std::to_string(e) + ".";
                sh[E + "w1.weight"] = {104, 72};
                sh[E + "w2.weight"] = {72, 104};
                sh[E + "w3.weight"] = {104, 72};
            }
        } else {
            sh[L + "mlp.gate_proj.weight"] = {104, 72};
            sh[L + "mlp.up_proj.weight"] = {104, 72};
            sh[L + "mlp.down_proj.weight"] = {72, 104};
        }
    }
    return sh;
}

const HFTensorPlan& find(const std::vector<HFTensorPlan>& plans, const std::string& name) {
    auto it = std::find_if(plans.begin(), plans.end(), [&](auto& p) { return p.name == name; });
    if (it == plans.end()) throw std::runtime_error("no plan for " + name);
    return *it;
}

std::string error_of(const HFModelSpec& s, const HFShapes& sh) {
    try {
        plan_hf_tensors(s, sh, "/models/x");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(HFTensorNames, LlamaPlan) {
    const auto s = llama_spec();
    const auto plans = plan_hf_tensors(s, llama_shapes(s), "/models/x");
    EXPECT_EQ(plans.size(), 2u + 1 + 2 * 9);
    const auto& q = find(plans, "blk.1.attn_q.weight");
    EXPECT_EQ(q.sources, (std::vector<std::string>{"model.layers.1.self_attn.q_proj.weight"}));
    EXPECT_EQ(q.transform, HFTransform::PermuteQ);
    EXPECT_EQ(q.ne, (std::vector<int64_t>{72, 72}));
    const auto& k = find(plans, "blk.0.attn_k.weight");
    EXPECT_EQ(k.transform, HFTransform::PermuteK);
    EXPECT_EQ(k.ne, (std::vector<int64_t>{72, 24}));
    EXPECT_EQ(find(plans, "blk.0.attn_v.weight").transform, HFTransform::None);
    EXPECT_EQ(find(plans, "blk.0.ffn_down.weight").ne, (std::vector<int64_t>{104, 72}));
    EXPECT_EQ(find(plans, "output.weight").sources[0], "lm_head.weight");
    EXPECT_EQ(find(plans, "blk.1.ffn_norm.weight").sources[0],
              "model.layers.1.post_attention_layernorm.weight");
}

TEST(HFTensorNames, TiedLlamaHasNoOutput) {
    auto s = llama_spec();
    s.tied_embeddings = true;
    const auto plans = plan_hf_tensors(s, llama_shapes(s, false), "/models/x");
    EXPECT_TRUE(std::none_of(plans.begin(), plans.end(),
                             [](auto& p) { return p.name == "output.weight"; }));
    s.tied_embeddings = false;
    EXPECT_NE(error_of(s, llama_shapes(s, false)).find("missing tensor 'lm_head.weight'"),
              std::string::npos);
}

TEST(HFTensorNames, MixtralExpertsStacked) {
    const auto s = llama_spec(4);
    const auto plans = plan_hf_tensors(s, llama_shapes(s), "/models/x");
    const auto& g = find(plans, "blk.1.ffn_gate_exps.weight");
    ASSERT_EQ(g.sources.size(), 4u);
    EXPECT_EQ(g.sources[2], "model.layers.1.block_sparse_moe.experts.2.w1.weight");
    EXPECT_EQ(g.ne, (std::vector<int64_t>{72, 104, 4}));
    EXPECT_EQ(find(plans, "blk.1.ffn_down_exps.weight").sources[3],
              "model.layers.1.block_sparse_moe.experts.3.w2.weight");
    EXPECT_EQ(find(plans, "blk.1.ffn_down_exps.weight").ne, (std::vector<int64_t>{104, 72, 4}));
    EXPECT_EQ(find(plans, "blk.0.ffn_up_exps.weight").sources[0],
              "model.layers.0.block_sparse_moe.experts.0.w3.weight");
    EXPECT_EQ(find(plans, "blk.0.ffn_gate_inp.weight").ne, (std::vector<int64_t>{72, 4}));
    EXPECT_TRUE(hf_tensor_forced_f32(find(plans, "blk.0.ffn_gate_inp.weight")));
    EXPECT_FALSE(hf_tensor_forced_f32(find(plans, "blk.0.ffn_up_exps.weight")));
}

TEST(HFTensorNames, Gpt2TransposedAndTiedOutput) {
    HFModelSpec s;
    s.arch = "gpt2", s.family = HFFamily::Gpt2;
    s.n_vocab = 40, s.n_embd = 12, s.n_layer = 1, s.n_head = 3, s.n_head_kv = 3, s.head_dim = 4;
    s.n_ff = 20, s.n_ctx = 16, s.tied_embeddings = true;
    HFShapes sh = {{"transformer.wte.weight", {40, 12}},
                   {"transformer.wpe.weight", {16, 12}},
                   {"transformer.ln_f.weight", {12}},
                   {"transformer.ln_f.bias", {12}},
                   {"transformer.h.0.ln_1.weight", {12}},
                   {"transformer.h.0.ln_1.bias", {12}},
                   {"transformer.h.0.ln_2.weight", {12}},
                   {"transformer.h.0.ln_2.bias", {12}},
                   {"transformer.h.0.attn.c_attn.weight", {12, 36}},
                   {"transformer.h.0.attn.c_attn.bias", {36}},
                   {"transformer.h.0.attn.c_proj.weight", {12, 12}},
                   {"transformer.h.0.attn.c_proj.bias", {12}},
                   {"transformer.h.0.attn.bias", {1, 1, 16, 16}},  // old mask buffer: dropped
                   {"transformer.h.0.mlp.c_fc.weight", {12, 20}},
                   {"transformer.h.0.mlp.c_fc.bias", {20}},
                   {"transformer.h.0.mlp.c_proj.weight", {20, 12}},
                   {"transformer.h.0.mlp.c_proj.bias", {12}}};
    const auto plans = plan_hf_tensors(s, sh, "/m");
    const auto& qkv = find(plans, "blk.0.attn_qkv.weight");
    EXPECT_EQ(qkv.transform, HFTransform::Transpose);
    EXPECT_EQ(qkv.ne, (std::vector<int64_t>{12, 36}));  // Linear [36, 12] in GGML order
    EXPECT_EQ(find(plans, "blk.0.ffn_down.weight").ne, (std::vector<int64_t>{20, 12}));
    EXPECT_EQ(find(plans, "output.weight").sources[0], "transformer.wte.weight");
    EXPECT_TRUE(hf_tensor_forced_f32(find(plans, "position_embd.weight")));
    EXPECT_TRUE(hf_tensor_forced_f32(find(plans, "blk.0.attn_qkv.bias")));
    EXPECT_FALSE(hf_tensor_forced_f32(find(plans, "blk.0.attn_qkv.weight")));
}

TEST(HFTensorNames, Errors) {
    const auto s = llama_spec();
    auto sh = llama_shapes(s);
    sh.erase("model.layers.1.mlp.up_proj.weight");
    auto e = error_of(s, sh);
    EXPECT_NE(e.find("/models/x: missing tensor 'model.layers.1.mlp.up_proj.weight'"),
              std::string::npos)
        << e;

    sh = llama_shapes(s);
    sh["model.layers.0.self_attn.k_proj.weight"] = {72, 72};
    e = error_of(s, sh);
    EXPECT_NE(
        e.find("'model.layers.0.self_attn.k_proj.weight' has shape [72, 72], expected [24, 72]"),
        std::string::npos)
        << e;

    sh = llama_shapes(s);
    sh["model.layers.0.self_attn.q_norm.weight"] = {12};
    e = error_of(s, sh);
    EXPECT_NE(e.find("unexpected tensor 'model.layers.0.self_attn.q_norm.weight'"),
              std::string::npos)
        << e;

    sh = llama_shapes(s);
    sh["model.layers.0.self_attn.rotary_emb.inv_freq"] = {6};  // a buffer some checkpoints keep
    EXPECT_EQ(error_of(s, sh), "");
}

// llama.cpp's permute: view rows as [n_head, 2, head_dim/2] and swap the last two axes.
TEST(HFTensorNames, PermuteMatchesLlamaCppReshape) {
    std::mt19937 rng(5);
    for (int n_head : {1, 2, 6}) {
        const int hd = 10, rows = n_head * hd, cols = 7;
        std::vector<float> src(rows * cols), dst(rows * cols);
        for (auto& x : src) x = static_cast<float>(rng() % 1000);
        permute_rope_rows(src.data(), dst.data(), rows, cols, n_head);
        for (int h = 0; h < n_head; ++h)
            for (int a = 0; a < 2; ++a)
                for (int b = 0; b < hd / 2; ++b)
                    for (int c = 0; c < cols; ++c) {
                        // source index [h][a][b] -> destination [h][b][a]
                        const float want = src[((h * 2 + a) * (hd / 2) + b) * cols + c];
                        EXPECT_EQ(dst[((h * (hd / 2) + b) * 2 + a) * cols + c], want);
                    }
    }
    std::vector<float> x(30), y(30);
    EXPECT_THROW(permute_rope_rows(x.data(), y.data(), 5, 6, 2), Error);
}

}  // namespace
}  // namespace syslm::io
