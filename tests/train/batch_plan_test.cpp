// Token-budget batching (train/batch_plan.hpp) and the activation arena it measures: the plan
// keeps the tokens per step and splits them into the largest micro-batch whose estimate fits;
// the arena's measured size grows with the batch and shrinks with recompute; memory sizes parse
// with units and bad ones are refused.
#include <gtest/gtest.h>


#include "core/error.hpp"
#include "io/gguf.hpp"
#include "../common/random_model.hpp"
#include "train/batch_plan.hpp"

namespace syslm::train {
namespace {

std::string make_model() {
    return testing::write_test_model("train_batch_plan", testing::small_model_config("llama", 64, 5));
}

TEST(BatchPlan, KeepsTheTokensPerStepAndFitsTheLimit) {
    const io::GGUFFile file(make_model());
    TrainModel m(file);
    const int T = 32, sequences = 12;
    const size_t one = training_memory_bytes(m, OptimizerKind::AdamW, 1, T);
    const size_t all = training_memory_bytes(m, OptimizerKind::AdamW, sequences, T);
    ASSERT_LT(one, all);
    EXPECT_LT(training_memory_bytes(m, OptimizerKind::Sgd, 4, T),
              training_memory_bytes(m, OptimizerKind::AdamW, 4, T));

    const BatchPlan unlimited = plan_batches(m, OptimizerKind::AdamW, T, sequences, 0);
    EXPECT_EQ(unlimited.micro_batch, sequences);
    EXPECT_EQ(unlimited.accum, 1);
    for (size_t limit : {all, all - 1, (one + all) / 2, one}) {
        const BatchPlan p = plan_batches(m, OptimizerKind::AdamW, T, sequences, limit);
        EXPECT_EQ(p.micro_batch * p.accum, sequences);
        EXPECT_LE(p.bytes, limit);
        // The largest divisor that fits: the next larger divisor would not.
        for (int B = p.micro_batch + 1; B <= sequences; ++B)
            if (sequences % B == 0) {
                EXPECT_GT(training_memory_bytes(m, OptimizerKind::AdamW, B, T), limit);
                break;
            }
    }
    EXPECT_EQ(plan_batches(m, OptimizerKind::AdamW, T, sequences, all - 1).micro_batch, 6);
    EXPECT_THROW(plan_batches(m, OptimizerKind::AdamW, T, sequences, one - 1), Error);
}

TEST(BatchPlan, ArenaGrowsWithTheBatchAndShrinksWithRecompute) {
    const io::GGUFFile file(make_model());
    TrainModel none(file, Recompute::None), sel(file, Recompute::Selective),
        full(file, Recompute::Full);
    EXPECT_GT(none.activation_bytes(8, 32), none.activation_bytes(4, 32));
    EXPECT_GT(none.activation_bytes(4, 32), sel.activation_bytes(4, 32));
    EXPECT_GT(sel.activation_bytes(4, 32), full.activation_bytes(4, 32));
}

TEST(BatchPlan, MemorySizesParseWithUnits) {
    EXPECT_EQ(parse_memory_size("1000"), 1000u);
    EXPECT_EQ(parse_memory_size("512MiB"), size_t{512} << 20);
    EXPECT_EQ(parse_memory_size("2G"), size_t{2} << 30);
    EXPECT_EQ(parse_memory_size("1.5GiB"), size_t{3} << 29);
    EXPECT_EQ(parse_memory_size("2GB"), size_t{2000000000});
    EXPECT_EQ(parse_memory_size("19MB"), size_t{19000000});
    for (const char* bad : {"", "MiB", "-1G", "12 GB", "1e3", "0", "1.2.3"})
        EXPECT_THROW(parse_memory_size(bad), Error) << bad;
}

}  // namespace
}  // namespace syslm::train
