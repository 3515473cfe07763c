// The K-quant recipes choose types per tensor role and layer as llama.cpp's llama-quantize does.
// Expected layers are worked out by hand from llama.cpp's use_more_bits rule for 12 layers:
// i < 12/8 (layer 0), i >= 7*12/8 (10, 11), (i - 1) % 3 == 2 (3, 6, 9).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "../common/random_model.hpp"
#include "compress/quantize_model.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"

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


// Per-tensor rules (llama-quantize's --tensor-type): the first matching pattern overrides the
// recipe for weight matrices only; rows that do not fit the rule's block are an error naming the
// tensor; malformed rules are refused.
TEST(TensorTypeRules, OverrideTheRecipeForMatchingMatricesOnly) {
    model::InitConfig c = testing::small_model_config("llama", 32, 71);
    c.n_embd = 64;  // rows of 64 and 96: multiples of 32, not of the K-quants' 256
    c.n_head = 4;
    c.n_ff = 96;
    const std::string in = testing::write_test_model("rules_in", c);
    const std::string out = std::string(SYSLM_TEST_TMP) + "/rules_out.gguf";
    QuantizeOptions o;
    o.target = *parse_quant_target("Q4_0");
    o.tensor_types = {parse_tensor_type_rule("blk\\.1\\.attn_v=q8_0"),
                      parse_tensor_type_rule("attn_v=q5_0"), parse_tensor_type_rule("ffn_down=Q4_1"),
                      parse_tensor_type_rule("norm=q8_0")};
    quantize_model(in, out, o);
    const io::GGUFFile f(out);
    for (const io::GGUFTensor& t : f.tensors()) {
        DType want = DType::Q4_0;
        if (t.name == "blk.1.attn_v.weight") want = DType::Q8_0;
        else if (t.name.find("attn_v") != std::string::npos) want = DType::Q5_0;
        else if (t.name.find("ffn_down") != std::string::npos) want = DType::Q4_1;
        else if (t.name == "output.weight") want = DType::Q8_0;  // Q6_K's 256 does not fit 64
        else if (t.ne.size() == 1) want = DType::F32;  // norms: not weight matrices
        EXPECT_EQ(t.type, want) << t.name;
    }
    QuantizeOptions bad = o;
    bad.tensor_types = {parse_tensor_type_rule("ffn_down=q4_k")};
    try {
        quantize_model(in, out + ".bad", bad);
        ADD_FAILURE() << "a Q4_K rule on rows of 96 was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("blk.0.ffn_down.weight"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(parse_tensor_type_rule("attn_v"), Error);
    EXPECT_THROW(parse_tensor_type_rule("attn_v=q4_k_m"), Error);  // a recipe, not a type
    EXPECT_THROW(parse_tensor_type_rule("attn_v=q9"), Error);
    EXPECT_THROW(parse_tensor_type_rule("attn_v[=q8_0"), Error);  // not a regex
}

}  // namespace
}  // namespace syslm::compress
