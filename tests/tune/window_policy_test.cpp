// The window-by-length knob (tune/window_policy.hpp): the policy is the smallest window within
// the quality limit of each length's best, written into a copy of the model that loads with it,
// and the measurement runs each (length, window) as perplexity over the text.
#include "tune/window_policy.hpp"

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
    const std::vector<WindowMeasurement> table = {{64, 16, 10.30, 0, 1},  {64, 32, 10.10, 0, 1},
                                                  {64, 64, 10.00, 0, 1},  {256, 16, 12.00, 0, 1},
                                                  {256, 32, 10.60, 0, 1}, {256, 64, 10.45, 0, 1},
                                                  {256, 128, 10.40, 0, 1}};
    EXPECT_EQ(choose_windows(table, {64, 256}, 0.01), (std::vector<int>{32, 64}));
    EXPECT_EQ(choose_windows(table, {64, 256}, 0.05), (std::vector<int>{16, 32}));
    EXPECT_EQ(choose_windows(table, {64, 256}, 0.0), (std::vector<int>{64, 128}));
    EXPECT_THROW(choose_windows(table, {128}, 0.01), Error);
}

TEST(WindowPolicy, MeasuredAndWrittenIntoTheModel) {
    model::InitConfig c = testing::small_model_config("llama", 128, 21);
    c.window = 6;
    const std::string path = testing::write_test_model("window_policy", c);
    const io::GGUFFile file(path);
    std::vector<int32_t> tokens = testing::random_ids(200, 4);
    WindowSearch s;
    s.lengths = {24, 48};
    s.windows = {2, 6, 48};
    s.threads = 2;
    s.max_chunks = 3;
    int reported = 0;
    const auto table =
        measure_windows(path, tokens, 1, s, [&](const WindowMeasurement&) { ++reported; });
    ASSERT_EQ(table.size(), 6u);
    EXPECT_EQ(reported, 6);
    for (const WindowMeasurement& p : table) {
        EXPECT_TRUE(std::isfinite(p.ppl) && p.ppl > 1) << p.length << " " << p.window;
        EXPECT_GT(p.tokens_per_s, 0);
        EXPECT_EQ(p.chunks, 3);
    }
    EXPECT_NE(table[0].ppl, table[2].ppl);  // the window changed the model's predictions
    const std::string out = std::string(SYSLM_TEST_TMP) + "/window_policy_out.gguf";
    write_window_policy(file, {24, 48}, {2, 6}, out);
    const model::HParams hp = model::load_hparams(io::GGUFFile(out));
    EXPECT_EQ(hp.policy_lengths, (std::vector<int>{24, 48}));
    EXPECT_EQ(hp.policy_windows, (std::vector<int>{2, 6}));
    EXPECT_EQ(hp.sliding_window, 6);
    // Written again, the old policy is replaced, not duplicated.
    const std::string again = std::string(SYSLM_TEST_TMP) + "/window_policy_again.gguf";
    write_window_policy(io::GGUFFile(out), {100}, {5}, again);
    EXPECT_EQ(model::load_hparams(io::GGUFFile(again)).policy_windows, (std::vector<int>{5}));
    tokens.resize(40);  // fewer than two chunks of 24 tokens
    EXPECT_THROW(measure_windows(path, tokens, 1, s), Error);
}

}  // namespace
}  // namespace syslm::tune
