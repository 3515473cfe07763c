// Batches from the strata of a `syslm data mix` directory (curate/mixture.hpp writes its
// mixture.json), one stratum per optimizer step, for per-stratum learning rates and curricula
// (seed 004 §4.1): each step's micro-batches all come from one stratum, so the step's learning
// rate can be that stratum's.
//
// Draws. Step s draws a stratum with probability proportional to its mixture weight, from a
// uniform number fixed by (seed, s) (SplitMix64's finaliser), so a resumed or data-parallel run
// draws the same strata. With the easy-to-hard curriculum the steps fall into K equal phases
// (K difficulty levels); phase p draws only among the strata of levels <= p (easy first, then
// easy and medium, then all: the "baby steps" curriculum, which keeps the easy text in sight).
// Each stratum reads its own train split through its own data::BatchLoader (seed + index), so
// its windows are shuffled and visited once per epoch as in a single data set.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "train/trainer.hpp"

namespace syslm::train {

struct StratumInfo {
    std::string name, source, level;
    int level_index = 0;  // 0 = easiest; 0 for every stratum without difficulty levels
    double weight = 0;
    std::string dir;  // its prepared data set
};

// The strata of a data mix directory; throws Error naming mixture.json when it is missing or bad.
std::vector<StratumInfo> read_strata(const std::string& mix_dir);
int difficulty_levels(const std::vector<StratumInfo>& strata);  // the largest level index + 1

struct StrataOptions {
    uint64_t seed = 0;
    int n_vocab = 0, B = 0, T = 0;
    int calls_per_step = 1;  // micro-batches per optimizer step: one stratum for all of them
    int64_t total_steps = 0;
    bool curriculum = false;  // easy to hard
};

class StrataBatches : public BatchSource {
public:
    StrataBatches(const std::string& mix_dir, const StrataOptions& opt);
    ~StrataBatches() override;
    void next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) override;
    std::string position() const override;
    void seek(const std::string& position) override;
    double waited_s() const override;
    int stratum() const override { return current_; }
    const std::vector<StratumInfo>& strata() const { return strata_; }
    int stratum_at(int64_t step) const;  // the stratum step `step` draws

private:
    std::vector<StratumInfo> strata_;
    StrataOptions opt_;
    int levels_ = 1;
    std::vector<std::unique_ptr<ShardBatches>> sources_;
    int64_t calls_ = 0;  // micro-batches served
    int current_ = -1;
};

}  // namespace syslm::train
