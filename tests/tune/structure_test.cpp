// The structure knob's arithmetic: which pruning levels are tried for a shape, how a level is
// read from the command line, and the recovery time prediction that gates a level on the budget.
#include "tune/structure.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace syslm::tune {
namespace {

model::HParams dense(int n_ff) {
    model::HParams hp;
    hp.n_layer = 4;
    hp.n_head = 8;
    hp.n_embd = 256;
    hp.n_ff = n_ff;
    hp.n_ctx_train = 256;
    return hp;
}

std::vector<int> kept(const model::HParams& hp, int max_levels = 2) {
    std::vector<int> out;
    for (const PruneSettings& s : default_prune_levels(hp, 100, max_levels)) {
        EXPECT_EQ(s.recover_steps, 100);
        EXPECT_EQ(s.heads, 0);
        EXPECT_EQ(s.layers, 0);
        // The fraction leaves exactly the width listed (prune_structured rounds n_ff * ffn).
        out.push_back(hp.n_ff - static_cast<int>(std::llround(s.ffn * hp.n_ff)));
    }
    return out;
}

TEST(PruneLevels, KeepHalfTo90PercentInWholeRowsOfTheKernelsBlocks) {
    EXPECT_EQ(kept(dense(704)), (std::vector<int>{512}));            // the quickstart's model
    EXPECT_EQ(kept(dense(5632)), (std::vector<int>{4864, 4608}));    // TinyLlama: 256s
    EXPECT_EQ(kept(dense(5632), 4), (std::vector<int>{4864, 4608, 4352, 4096}));
    EXPECT_EQ(kept(dense(192)), (std::vector<int>{128}));            // narrow: 64s
    EXPECT_EQ(kept(dense(100)), (std::vector<int>{64}));
    EXPECT_TRUE(kept(dense(64)).empty());                           // nothing between 32 and 57
    model::HParams moe = dense(704);
    moe.n_expert = 8;
    EXPECT_TRUE(default_prune_levels(moe, 100).empty());
}

TEST(PruneLevels, ParsesAGivenLevelAndRefusesNonsense) {
    const PruneSettings s = parse_prune_level("ffn=0.25,heads=0.125,layers=1", 50);
    EXPECT_DOUBLE_EQ(s.ffn, 0.25);
    EXPECT_DOUBLE_EQ(s.heads, 0.125);
    EXPECT_EQ(s.layers, 1);
    EXPECT_EQ(s.recover_steps, 50);
    for (const char* bad : {"ffn=1.5", "ffn", "width=0.2", "layers=-1", "ffn=0", ""})
        EXPECT_THROW(parse_prune_level(bad, 50), Error) << bad;
}

TEST(PruneLevels, DefaultRecoveryIs400StepsAtMostFourPassesOverTheText) {
    const model::HParams hp = dense(704);  // sequences of 128 (+1) tokens, 8 a step
    EXPECT_EQ(default_recover_steps(hp, 256, 1000000), 400);
    EXPECT_EQ(default_recover_steps(hp, 256, 76049), 4 * 76049 / (8 * 129));  // 294
    EXPECT_EQ(default_recover_steps(hp, 256, 3000), 50);
    EXPECT_EQ(default_recover_steps(hp, 64, 76049), 400);  // shorter sequences: more steps
}

TEST(PruneLevels, RecoveryTimeGrowsWithStepsAndShrinksWithThePeak) {
    const model::HParams hp = dense(704);
    PruneSettings s;
    s.recover_steps = 200;
    // 8 sequences of 128 tokens a step, 4 x the forward's FLOPs a token, at a quarter of the peak.
    EXPECT_DOUBLE_EQ(predicted_recovery_s(hp, 1e7, s, 256, 100), 4 * 1e7 * 200 * 8 * 128 / 25e9);
    EXPECT_EQ(recovery_seq(hp, 64), 64);  // the tune's chunk when shorter
    PruneSettings twice = s;
    twice.recover_steps = 400;
    EXPECT_DOUBLE_EQ(predicted_recovery_s(hp, 1e7, twice, 256, 100),
                     2 * predicted_recovery_s(hp, 1e7, s, 256, 100));
    EXPECT_DOUBLE_EQ(predicted_recovery_s(hp, 1e7, s, 256, 200),
                     predicted_recovery_s(hp, 1e7, s, 256, 100) / 2);
}

}  // namespace
}  // namespace syslm::tune
