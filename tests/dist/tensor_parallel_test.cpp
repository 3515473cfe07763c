// Tensor parallelism (Megatron-style) against one process holding the whole model: with tp = 2
// (and dp = p / 2 replicas, tensor-parallel ranks innermost), 20 AdamW steps with clipping give
// the same losses and, gathered, the same weights as the single process on the whole batch.
// Runs with 2 ranks (tp = 2) and 4 ranks (dp = 2 x tp = 2).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../common/random_model.hpp"
#include "core/error.hpp"
#include "dist/communicator.hpp"
#include "world.hpp"
#include "io/gguf.hpp"
#include "train/trainer.hpp"

namespace syslm::dist {
namespace {

struct Result {
    std::vector<double> losses;
    train::ParamStore weights;
};

Result train_run(const io::GGUFFile& file, const std::vector<int32_t>& ids, int first, int rows,
                 int T, Communicator* tp, Communicator* dp) {
    train::TrainModel m(file, train::Recompute::None, tp);
    std::vector<int32_t> mine(ids.begin() + static_cast<ptrdiff_t>(first) * (T + 1),
                              ids.begin() + static_cast<ptrdiff_t>(first + rows) * (T + 1));
    train::FixedBatch batch(mine, rows, T);
    train::TrainOptions opt;
    opt.B = rows;
    opt.T = T;
    opt.steps = 20;
    opt.clip = 0.5;  // active: the norm must come from every rank's slices
    opt.schedule.kind = train::ScheduleKind::Constant;
    opt.schedule.lr = 3e-3f;
    opt.data_parallel = dp;
    ThreadPool pool(1);
    train::Trainer t(m, batch, opt, pool);
    Result r;
    while (!t.done()) r.losses.push_back(t.step().loss);
    r.weights = tp ? m.params().gathered(*tp) : m.params();
    return r;
}

TEST(TensorParallel, SameLossesAndWeightsAsOneProcess) {
    Communicator& c = world_comm();
    const int p = c.size();
    if (p % 2 != 0) GTEST_SKIP() << "tensor parallelism over 2 ranks needs an even world";
    const int tp = 2, dp = p / tp, B = 2, T = 9;
    std::unique_ptr<Communicator> tp_group = c.split(c.rank() / tp, c.rank());
    std::unique_ptr<Communicator> dp_group = c.split(c.rank() % tp, c.rank());
    ASSERT_EQ(tp_group->size(), tp);
    ASSERT_EQ(dp_group->size(), dp);
    const std::string path = testing::write_test_model(
        "tp_" + std::to_string(c.rank()), testing::small_model_config("llama", 32, 46));
    const io::GGUFFile file(path);
    std::mt19937 rng(81);
    std::vector<int32_t> ids(static_cast<size_t>(dp) * B * (T + 1));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);

    const Result one = train_run(file, ids, 0, dp * B, T, nullptr, nullptr);
    const Result par = train_run(file, ids, dp_group->rank() * B, B, T, tp_group.get(),
                                 dp > 1 ? dp_group.get() : nullptr);
    ASSERT_EQ(one.losses.size(), par.losses.size());
    for (size_t s = 0; s < one.losses.size(); ++s)
        EXPECT_NEAR(par.losses[s], one.losses[s], 1e-5 * std::fabs(one.losses[s])) << "step " << s;
    ASSERT_EQ(one.weights.params().size(), par.weights.params().size());
    float worst = 0;
    for (size_t i = 0; i < one.weights.params().size(); ++i) {
        const train::Param& a = one.weights.params()[i];
        const train::Param& b = par.weights.params()[i];
        ASSERT_EQ(a.name, b.name);
        ASSERT_EQ(a.ne, b.ne) << a.name;
        for (int64_t k = 0; k < a.numel; ++k)
            worst = std::max(worst, std::fabs(one.weights.values()[a.offset + k] -
                                              par.weights.values()[b.offset + k]));
    }
    EXPECT_LE(worst, 1e-5f) << "largest weight difference after 20 steps";
    EXPECT_LT(par.losses.back(), par.losses.front());
}

TEST(TensorParallel, RefusesModelsItCannotCut) {
    Communicator& c = world_comm();
    if (c.size() != 2) GTEST_SKIP() << "checked with 2 ranks";
    model::InitConfig cfg = testing::small_model_config("gpt2", 32, 47);
    const io::GGUFFile gpt2(testing::write_test_model("tp_gpt2_" + std::to_string(c.rank()), cfg));
    EXPECT_THROW(train::TrainModel(gpt2, train::Recompute::None, &c), Error);
    cfg = testing::small_model_config("llama", 32, 48);
    cfg.n_head_kv = 1;  // one KV head cannot be split over 2 ranks
    cfg.n_head = 3;
    const io::GGUFFile odd(testing::write_test_model("tp_odd_" + std::to_string(c.rank()), cfg));
    EXPECT_THROW(train::TrainModel(odd, train::Recompute::None, &c), Error);
}

}  // namespace
}  // namespace syslm::dist
