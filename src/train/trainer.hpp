// The training loop: micro-batches from a BatchSource, gradient accumulation, global-norm
// clipping, the learning-rate schedule and the optimizer step, with per-step statistics for the
// caller to print or log. Run control (evaluation, checkpoints, resume) builds on this.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "core/thread_pool.hpp"
#include "train/optimizer.hpp"
#include "train/train_model.hpp"

namespace syslm::train {

// Fills one micro-batch: tokens and targets, B x T each.
class BatchSource {
public:
    virtual ~BatchSource() = default;
    virtual void next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) = 0;
};

// The same batch every step, from B sequences of T + 1 ids (input, then shifted targets): for
// checking against a reference run and for overfitting tests.
class FixedBatch : public BatchSource {
public:
    FixedBatch(std::vector<int32_t> ids, int B, int T);
    void next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) override;

private:
    std::vector<int32_t> tokens_, targets_;
};

// Uniformly random tokens from a seeded generator: for speed measurements.
class SyntheticBatches : public BatchSource {
public:
    SyntheticBatches(uint64_t seed, int n_vocab, int B, int T);
    void next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) override;

private:
    std::mt19937_64 rng_;
    int n_vocab_, n_;
};

struct TrainOptions {
    int B = 4, T = 64;
    int64_t steps = 10;
    int accum = 1;      // micro-batches per optimizer step
    double clip = 1.0;  // global gradient norm limit; <= 0: no clipping
    Schedule schedule;  // its `total` is set to `steps`
    OptimizerConfig optimizer;
};

struct StepStats {
    int64_t step;      // 0-based
    double loss;       // mean over the step's micro-batches
    double grad_norm;  // before clipping
    float lr;
    double seconds;  // wall time of the whole step
};

// Trains for opt.steps steps; on_step (may be empty) sees every step's statistics.
void train(TrainModel& model, BatchSource& data, const TrainOptions& opt, ThreadPool& pool,
           const std::function<void(const StepStats&)>& on_step);

}  // namespace syslm::train
