// Training with a range of windows (TrainOptions::window_min / window_max): each step's window
// is drawn from the range by (seed, step) alone, the step's gradients are those of the model run
// with that window, and the model keeps its own window between steps (evaluation, the file).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../common/random_model.hpp"
#include "backend/cpu_backend.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "train/trainer.hpp"

namespace syslm::train {
namespace {

TEST(WindowRange, StepTrainsWithTheSampledWindow) {
    model::InitConfig c = testing::small_model_config("llama_local_global", 64, 13);
    c.window = 12;  // layer 0 local, layer 1 global
    const io::GGUFFile file(testing::write_test_model("window_range", c));
    const int B = 2, T = 20;
    std::mt19937 rng(4);
    std::vector<int32_t> ids(static_cast<size_t>(B * (T + 1)));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    backend::CpuBackend be(2);

    TrainOptions opt;
    opt.B = B;
    opt.T = T;
    opt.steps = 40;
    opt.clip = 0;
    opt.optimizer.kind = OptimizerKind::Sgd;
    opt.optimizer.momentum = 0;
    opt.schedule.kind = ScheduleKind::Constant;
    opt.schedule.lr = 1.0f;
    opt.window_min = 2;
    opt.window_max = 9;
    opt.window_seed = 77;
    TrainModel a(file);
    FixedBatch batch_a(ids, B, T);
    Trainer t(a, batch_a, opt, be);
    // Deterministic, within the range, and spread over it.
    std::set<int> seen;
    for (int64_t s = 0; s < 40; ++s) {
        const int w = t.window_at(s);
        EXPECT_EQ(w, t.window_at(s));
        EXPECT_GE(w, 2);
        EXPECT_LE(w, 9);
        seen.insert(w);
    }
    EXPECT_GE(seen.size(), 5u);

    // Independent: the gradient of the same model run with step 0's window.
    TrainModel b(file);
    b.set_window(t.window_at(0));
    FixedBatch batch_b(ids, B, T);
    std::vector<int32_t> tok, tgt;
    batch_b.next(tok, tgt);
    b.params().zero_grads();
    b.forward_backward(tok, tgt, B, T, be);
    // And with the file's window: a different gradient (the window mattered).
    TrainModel own(file);
    own.params().zero_grads();
    own.forward_backward(tok, tgt, B, T, be);

    const std::vector<float> before(a.params().values(), a.params().values() + a.params().size());
    t.step();
    EXPECT_EQ(a.hparams().sliding_window, 12);  // the model's own again after the step
    double differs = 0;
    for (size_t i = 0; i < before.size(); ++i) {
        ASSERT_FLOAT_EQ(a.params().values()[i], before[i] - b.params().grads()[i]) << i;
        differs =
            std::max(differs, double(std::fabs(b.params().grads()[i] - own.params().grads()[i])));
    }
    EXPECT_GT(differs, 1e-6);
}

TEST(WindowRange, NeedsLocalLayers) {
    const io::GGUFFile file(testing::write_test_model("window_range_global",
                                                      testing::small_model_config("llama", 32, 3)));
    TrainModel m(file);
    EXPECT_THROW(m.set_window(4), Error);
}

}  // namespace
}  // namespace syslm::train
