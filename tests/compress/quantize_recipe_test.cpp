// The K-quant recipes choose types per tensor role and layer as llama.cpp's llama-quantize does.
// Expected layers are worked out by hand from llama.cpp's use_more_bits rule for 12 layers:
// i < 12/8 (layer 0), i >= 7*12/8 (10, 11), (i - 1) % 3 == 2 (3, 6, 9).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "compress/quantize_model.hpp"

namespace syslm::compress {
namespace {

DType type_of(const std::string& name, const QuantTarget& t, const ModelFacts& f) {
    const std::vector<int64_t> ne = {256, 256};
    return choose_tensor_type(name, DType::F32, ne, t, f).type;
}

TEST(QuantRecipe, ParsesNames) {
    EXPECT_EQ(parse_quant_target("q4_k_m")->mix, KMix::M);
    EXPECT_EQ(parse_quant_target("Q5_K_S")->type, DType::Q5_K);
    EXPECT_EQ(parse_quant_target("Q4_0")->mix, KMix::None);
    EXPECT_FALSE(parse_quant_target("Q4_0_M").has_value());
    EXPECT_FALSE(parse_quant_target("Q8_K").has_value());  // activation-only type
    EXPECT_EQ(quant_target_name(*parse_quant_target("q5_k_m")), "Q5_K_M");
    EXPECT_EQ(llama_ftype_of(*parse_quant_target("Q4_K_M")), 15u);
}

TEST(QuantRecipe, Q4KMGivesMoreBitsToSomeLayers) {
    ModelFacts f{"llama", true, 0, 12};
    const QuantTarget q4km{DType::Q4_K, KMix::M};
    const std::set<int> more = {0, 3, 6, 9, 10, 11};
    for (int il = 0; il < 12; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        const DType want = more.count(il) ? DType::Q6_K : DType::Q4_K;
        EXPECT_EQ(type_of(p + "attn_v.weight", q4km, f), want) << il;
        EXPECT_EQ(type_of(p + "ffn_down.weight", q4km, f), want) << il;
        EXPECT_EQ(type_of(p + "attn_q.weight", q4km, f), DType::Q4_K) << il;
        EXPECT_EQ(type_of(p + "ffn_up.weight", q4km, f), DType::Q4_K) << il;
        EXPECT_EQ(type_of(p + "attn_qkv.weight", q4km, f), DType::Q5_K) << il;
    }
    EXPECT_EQ(type_of("output.weight", q4km, f), DType::Q6_K);
    EXPECT_EQ(type_of("token_embd.weight", q4km, f), DType::Q4_K);
}

TEST(QuantRecipe, Q4KSGivesQ5KToEarlyLayers) {
    ModelFacts f{"llama", true, 0, 16};
    const QuantTarget q4ks{DType::Q4_K, KMix::S};
    for (int il = 0; il < 16; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        EXPECT_EQ(type_of(p + "attn_v.weight", q4ks, f), il < 4 ? DType::Q5_K : DType::Q4_K);
        EXPECT_EQ(type_of(p + "ffn_down.weight", q4ks, f), il < 2 ? DType::Q5_K : DType::Q4_K);
    }
    const QuantTarget plain{DType::Q4_K, KMix::None};  // plain Q4_K stays uniform
    EXPECT_EQ(type_of("blk.0.attn_v.weight", plain, f), DType::Q4_K);
}

// llama.cpp's Q2_K mix: attn_v Q3_K (Q4_K with >= 4 query heads per KV head), ffn_down and
// attn_output Q3_K, the rest Q2_K.
TEST(QuantRecipe, Q2KMix) {
    ModelFacts f{"llama", true, 0, 8};
    f.n_head = 8;
    f.n_head_kv = 8;
    const QuantTarget q2{DType::Q2_K, KMix::None};
    EXPECT_EQ(type_of("blk.3.attn_v.weight", q2, f), DType::Q3_K);
    EXPECT_EQ(type_of("blk.3.ffn_down.weight", q2, f), DType::Q3_K);
    EXPECT_EQ(type_of("blk.3.attn_output.weight", q2, f), DType::Q3_K);
    EXPECT_EQ(type_of("blk.3.attn_q.weight", q2, f), DType::Q2_K);
    EXPECT_EQ(type_of("blk.3.ffn_gate.weight", q2, f), DType::Q2_K);
    EXPECT_EQ(type_of("output.weight", q2, f), DType::Q6_K);
    f.n_head_kv = 2;  // GQA 4
    EXPECT_EQ(type_of("blk.3.attn_v.weight", q2, f), DType::Q4_K);
    EXPECT_EQ(llama_ftype_of(q2), 10u);
}

// Q3_K_M / Q3_K_L (llama.cpp's rules for 32 layers: n/16 = 2).
TEST(QuantRecipe, Q3KMixes) {
    ModelFacts f{"llama", true, 0, 32};
    const QuantTarget m{DType::Q3_K, KMix::M}, l{DType::Q3_K, KMix::L}, s{DType::Q3_K, KMix::S};
    for (int il = 0; il < 32; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        EXPECT_EQ(type_of(p + "attn_v.weight", m, f), il < 2 ? DType::Q5_K : DType::Q4_K);
        EXPECT_EQ(type_of(p + "ffn_down.weight", m, f), il < 2 ? DType::Q5_K : DType::Q4_K);
        EXPECT_EQ(type_of(p + "attn_output.weight", m, f), DType::Q4_K);
        EXPECT_EQ(type_of(p + "attn_q.weight", m, f), DType::Q3_K);
        EXPECT_EQ(type_of(p + "attn_v.weight", l, f), DType::Q5_K);
        EXPECT_EQ(type_of(p + "ffn_down.weight", l, f), DType::Q5_K);
        EXPECT_EQ(type_of(p + "attn_output.weight", l, f), DType::Q5_K);
        EXPECT_EQ(type_of(p + "ffn_up.weight", l, f), DType::Q3_K);
        EXPECT_EQ(type_of(p + "attn_v.weight", s, f), DType::Q3_K);
    }
    EXPECT_EQ(type_of("blk.0.attn_qkv.weight", m, f), DType::Q4_K);
    EXPECT_EQ(parse_quant_target("q3_k_l")->mix, KMix::L);
    EXPECT_FALSE(parse_quant_target("Q4_K_L").has_value());
    EXPECT_EQ(llama_ftype_of(m), 12u);
    EXPECT_EQ(llama_ftype_of(l), 13u);
    EXPECT_EQ(llama_ftype_of(s), 11u);
}

// With an importance matrix, Q4_0 and Q5_0 give ffn_down of the first eighth of the layers the
// type with a minimum (llama.cpp's guard); without one nothing changes.
TEST(QuantRecipe, Q40FfnDownGuardOnlyWithImatrix) {
    ModelFacts f{"llama", true, 0, 16};
    const QuantTarget q40{DType::Q4_0, KMix::None}, q50{DType::Q5_0, KMix::None};
    EXPECT_EQ(type_of("blk.1.ffn_down.weight", q40, f), DType::Q4_0);
    f.has_imatrix = true;
    EXPECT_EQ(type_of("blk.1.ffn_down.weight", q40, f), DType::Q4_1);
    EXPECT_EQ(type_of("blk.2.ffn_down.weight", q40, f), DType::Q4_0);
    EXPECT_EQ(type_of("blk.0.ffn_down.weight", q50, f), DType::Q5_1);
    EXPECT_EQ(type_of("blk.0.attn_q.weight", q50, f), DType::Q5_0);
}

}  // namespace
}  // namespace syslm::compress
