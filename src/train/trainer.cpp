#include "train/trainer.hpp"

#include <chrono>

#include "core/error.hpp"

namespace syslm::train {

FixedBatch::FixedBatch(std::vector<int32_t> ids, int B, int T) {
    SYSLM_CHECK(B > 0 && T > 0 && ids.size() == static_cast<size_t>(B) * (T + 1),
                "fixed batch: ", ids.size(), " ids for ", B, " sequences of ", T, " + 1");
    for (int b = 0; b < B; ++b) {
        const int32_t* seq = ids.data() + static_cast<size_t>(b) * (T + 1);
        tokens_.insert(tokens_.end(), seq, seq + T);
        targets_.insert(targets_.end(), seq + 1, seq + T + 1);
    }
}

void FixedBatch::next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    tokens = tokens_;
    targets = targets_;
}

SyntheticBatches::SyntheticBatches(uint64_t seed, int n_vocab, int B, int T)
    : rng_(seed), n_vocab_(n_vocab), n_(B * T) {}

void SyntheticBatches::next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    std::uniform_int_distribution<int32_t> pick(0, n_vocab_ - 1);
    tokens.resize(static_cast<size_t>(n_));
    targets.resize(static_cast<size_t>(n_));
    for (auto& t : tokens) t = pick(rng_);
    for (auto& t : targets) t = pick(rng_);
}

void train(TrainModel& model, BatchSource& data, const TrainOptions& opt, ThreadPool& pool,
           const std::function<void(const StepStats&)>& on_step) {
    SYSLM_CHECK(opt.steps > 0 && opt.accum > 0,
                "training: steps and accumulation must be positive");
    Optimizer optimizer(opt.optimizer, model.params());
    Schedule schedule = opt.schedule;
    schedule.total = opt.steps;
    std::vector<int32_t> tokens, targets;
    for (int64_t step = 0; step < opt.steps; ++step) {
        const auto t0 = std::chrono::steady_clock::now();
        model.params().zero_grads();
        double loss = 0;
        for (int micro = 0; micro < opt.accum; ++micro) {
            data.next(tokens, targets);
            loss += model.forward_backward(tokens, targets, opt.B, opt.T, pool);
        }
        if (opt.accum > 1) {  // the mean over micro-batches, as one batch accum times larger
            const float inv = 1.0f / static_cast<float>(opt.accum);
            float* g = model.params().grads();
            for (size_t i = 0; i < model.params().size(); ++i) g[i] *= inv;
        }
        const double norm = clip_grad_norm(model.params(), opt.clip, pool);
        const float lr = schedule.at(step);
        optimizer.step(lr, pool);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (on_step) on_step({step, loss / opt.accum, norm, lr, seconds});
    }
}

}  // namespace syslm::train
