// Settings by input length (tune/length_policy.hpp): the policy is the smallest value within
// the quality limit of each length's best, written into a copy of the model that loads with it,
// and the measurement runs each (length, value) as perplexity over the text: the window of a
// local-attention model, the top-p of a top-p MoE model.
#include "tune/length_policy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "../common/random_model.hpp"
#include "core/error.hpp"
#include "model/hparams.hpp"

namespace syslm::tune {
namespace {

TEST(WindowPolicy, SmallestWindowWithinTheLimitOfEachLengthsBest) {
    const std::vector<LengthMeasurement> table = {{64, 16, 10.30, 0, 1},  {64, 32, 10.10, 0, 1},
                                                  {64, 64, 10.00, 0, 1},  {256, 16, 12.00, 0, 1},
                                                  {256, 32, 10.60, 0, 1}, {256, 64, 10.45, 0, 1},
                                                  {256, 128, 10.40, 0, 1}};
    EXPECT_EQ(choose_by_length(window_knob(), table, {64, 256}, 0.01),
              (std::vector<double>{32, 64}));
    EXPECT_EQ(choose_by_length(window_knob(), table, {64, 256}, 0.05),
              (std::vector<double>{16, 32}));
    EXPECT_EQ(choose_by_length(window_knob(), table, {64, 256}, 0.0),
              (std::vector<double>{64, 128}));
    EXPECT_THROW(choose_by_length(window_knob(), table, {128}, 0.01), Error);
}

TEST(WindowPolicy, MeasuredAndWrittenIntoTheModel) {
    model::InitConfig c = testing::small_model_config("llama", 128, 21);
    c.window = 6;
    const std::string path = testing::write_test_model("window_policy", c);
    const io::GGUFFile file(path);
    std::vector<int32_t> tokens = testing::random_ids(200, 4);
    LengthSearch s;
    s.lengths = {24, 48};
    s.values = {2, 6, 48};
    s.threads = 2;
    s.max_chunks = 3;
    int reported = 0;
    const auto table = measure_by_length(window_knob(), path, tokens, 1, s,
                                         [&](const LengthMeasurement&) { ++reported; });
    ASSERT_EQ(table.size(), 6u);
    EXPECT_EQ(reported, 6);
    for (const LengthMeasurement& p : table) {
        EXPECT_TRUE(std::isfinite(p.ppl) && p.ppl > 1) << p.length << " " << p.value;
        EXPECT_GT(p.tokens_per_s, 0);
        EXPECT_EQ(p.chunks, 3);
    }
    EXPECT_NE(table[0].ppl, table[2].ppl);  // the window changed the model's predictions
    const std::string out = std::string(SYSLM_TEST_TMP) + "/window_policy_out.gguf";
    write_length_policy(window_knob(), file, {24, 48}, {2, 6}, out);
    const model::HParams hp = model::load_hparams(io::GGUFFile(out));
    EXPECT_EQ(hp.window_policy.lengths, (std::vector<int>{24, 48}));
    EXPECT_EQ(hp.window_policy.values, (std::vector<double>{2, 6}));
    EXPECT_EQ(hp.sliding_window, 6);
    // Written again, the old policy is replaced, not duplicated.
    const std::string again = std::string(SYSLM_TEST_TMP) + "/window_policy_again.gguf";
    write_length_policy(window_knob(), io::GGUFFile(out), {100}, {5}, again);
    EXPECT_EQ(model::load_hparams(io::GGUFFile(again)).window_policy.values,
              (std::vector<double>{5}));
    tokens.resize(40);  // fewer than two chunks of 24 tokens
    EXPECT_THROW(measure_by_length(window_knob(), path, tokens, 1, s), Error);
}

// The experts' knob: a top-p MoE model measured at several p (fewer experts at a smaller p
// change its predictions), the policy written as f32 and read back by length; a top-k model
// refuses the knob, and the policy's keys on it are refused at load.
TEST(ExpertPolicy, MeasuredAndWrittenIntoATopPModel) {
    const model::InitConfig c = testing::small_model_config("mixtral_top_p", 128, 23);
    const std::string path = testing::write_test_model("expert_policy", c);
    LengthSearch s;
    s.lengths = {24, 48};
    s.values = {0.05, 0.5, 1.0};
    s.threads = 2;
    s.max_chunks = 2;
    const auto table = measure_by_length(experts_knob(), path, testing::random_ids(200, 5), 1, s);
    ASSERT_EQ(table.size(), 6u);
    EXPECT_NE(table[0].ppl, table[2].ppl);  // p changed the experts each token takes
    const std::string out = std::string(SYSLM_TEST_TMP) + "/expert_policy_out.gguf";
    write_length_policy(experts_knob(), io::GGUFFile(path), {24, 48}, {0.25, 0.5}, out);
    const model::HParams hp = model::load_hparams(io::GGUFFile(out));
    EXPECT_FLOAT_EQ(hp.top_p_for_length(10), 0.25f);
    EXPECT_FLOAT_EQ(hp.top_p_for_length(30), 0.5f);
    EXPECT_FLOAT_EQ(hp.top_p_for_length(1000), 0.5f);
    model::Model m(out);
    m.set_expert_top_p(0.3f);
    EXPECT_FLOAT_EQ(m.hparams().moe_routing().top_p, 0.3f);
    EXPECT_THROW(m.set_expert_top_p(0.0f), Error);

    const std::string topk = testing::write_test_model(
        "expert_policy_topk", testing::small_model_config("mixtral", 128, 23));
    model::Model k(topk);
    EXPECT_THROW(k.set_expert_top_p(0.5f), Error);
    EXPECT_THROW(k.hparams().top_p_for_length(10), Error);
    const std::string bad = std::string(SYSLM_TEST_TMP) + "/expert_policy_topk_out.gguf";
    write_length_policy(experts_knob(), io::GGUFFile(topk), {24}, {0.5}, bad);
    EXPECT_THROW(model::load_hparams(io::GGUFFile(bad)), Error);
}

}  // namespace
}  // namespace syslm::tune
