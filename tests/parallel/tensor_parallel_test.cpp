// Tensor parallelism (Megatron-style) against one process holding the whole model: with tp = 2
// (and dp = p / 2 replicas, tensor-parallel ranks innermost), 20 AdamW steps with clipping give
// the same losses and, gathered, the same weights as the single process on the whole batch.
// Runs with 2 ranks (tp = 2) and 4 ranks (dp = 2 x tp = 2).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "../common/random_model.hpp"
#include "backend/cpu_backend.hpp"
#include "core/error.hpp"
#include "drift.hpp"
#include "io/gguf.hpp"
#include "parallel/communicator.hpp"
#include "train/trainer.hpp"
#include "world.hpp"

namespace syslm::parallel {
namespace {

struct Result {
    std::vector<double> losses;
    train::ParamStore weights;
    size_t state_bytes = 0;
};

// How far `a` and `b` disagree relative to how far training moved `reference` from `start`
// (drift.hpp): the parameters in the same order and shapes.
double relative_drift(const train::ParamStore& a, const train::ParamStore& b,
                      const train::ParamStore& reference, const train::ParamStore& start) {
    EXPECT_EQ(a.params().size(), b.params().size());
    testing::WeightDrift drift;
    for (size_t i = 0; i < std::min(a.params().size(), b.params().size()); ++i) {
        const train::Param& x = a.params()[i];
        const train::Param& y = b.params()[i];
        EXPECT_EQ(x.name, y.name);
        EXPECT_EQ(x.ne, y.ne) << x.name;
        if (x.ne != y.ne) continue;
        drift.add(a.values() + x.offset, b.values() + y.offset, reference.values() + x.offset,
                  start.values() + x.offset, static_cast<size_t>(x.numel));
    }
    return drift.relative();
}

// The longest reduction of a model: its vocabulary's softmax denominator (drift.hpp).
int64_t longest_sum(const io::GGUFFile& file) {
    return file.tensor("token_embd.weight").ne[1];
}

struct Sharding {
    int zero = 0;
    Compression compress = Compression::None;
    std::string save_at_10, resume;  // a checkpoint written after step 10; one to continue from
};

Result train_run(const io::GGUFFile& file, const std::vector<int32_t>& ids, int first, int rows,
                 int T, Communicator* tp, Communicator* dp, const Sharding& sh = {}) {
    std::optional<io::GGUFFile> resumed;
    if (!sh.resume.empty()) resumed.emplace(sh.resume + "/model.gguf");
    train::TrainModel m(resumed ? *resumed : file, train::Recompute::None, tp);
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
    opt.zero = sh.zero;
    opt.grad_compress = sh.compress;
    opt.compress_warmup = 5;
    backend::CpuBackend be(1);
    train::Trainer t(m, batch, opt, be);
    if (!sh.resume.empty()) t.load_state(sh.resume);
    Result r;
    while (!t.done()) {
        r.losses.push_back(t.step().loss);
        if (!sh.save_at_10.empty() && t.next_step() == 10)
            t.save_checkpoint(sh.save_at_10, file.metadata(), &file);
    }
    r.state_bytes = t.optimizer_state_bytes();
    r.weights = tp ? m.params().gathered(*tp) : m.params();
    return r;
}

// Qwen3's q/k norm weights are shared by the heads the ranks split: their gradient is summed
// over the tensor-parallel group. Gemma 2 and 3 add post-norms after the row-parallel outputs' sum,
// scaled embeddings tied to the (vocabulary-parallel) head and (2) soft-capped scores and logits.
class TensorParallelArch : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelArch, SameLossesAndWeightsAsOneProcess) {
    Communicator& c = world_comm();
    const int p = c.size();
    if (p % 2 != 0) GTEST_SKIP() << "tensor parallelism over 2 ranks needs an even world";
    const int tp = 2, dp = p / tp, B = 2, T = 9;
    std::unique_ptr<Communicator> tp_group = c.split(c.rank() / tp, c.rank());
    std::unique_ptr<Communicator> dp_group = c.split(c.rank() % tp, c.rank());
    ASSERT_EQ(tp_group->size(), tp);
    ASSERT_EQ(dp_group->size(), dp);
    const std::string path =
        testing::write_test_model("tp_" + GetParam() + "_" + std::to_string(c.rank()),
                                  testing::small_model_config(GetParam(), 32, 46));
    const io::GGUFFile file(path);
    std::mt19937 rng(81);
    std::vector<int32_t> ids(static_cast<size_t>(dp) * B * (T + 1));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);

    const Result one = train_run(file, ids, 0, dp * B, T, nullptr, nullptr);
    const Result par = train_run(file, ids, dp_group->rank() * B, B, T, tp_group.get(),
                                 dp > 1 ? dp_group.get() : nullptr);
    ASSERT_EQ(one.losses.size(), par.losses.size());
    const int64_t n = longest_sum(file);
    for (size_t s = 0; s < one.losses.size(); ++s)
        EXPECT_NEAR(par.losses[s], one.losses[s],
                    testing::rounding_drift_bound(static_cast<int>(s) + 1, n) * one.losses[s])
            << "step " << s;
    const train::ParamStore start = train::TrainModel(file).params();
    EXPECT_LE(relative_drift(one.weights, par.weights, one.weights, start),
              testing::rounding_drift_bound(20, n))
        << "weights after 20 steps";
    EXPECT_LT(par.losses.back(), par.losses.front());
}

INSTANTIATE_TEST_SUITE_P(Archs, TensorParallelArch,
                         ::testing::Values("llama", "qwen3", "gemma2", "gemma3"));

// dp = 2 x tp = 2 (4 ranks): ZeRO-1 and -2 shard each tensor-parallel slice's optimizer state
// over its data-parallel pair: the weights of plain dp x tp (which equal one process's, above),
// half the state per rank. A ZeRO-2 checkpoint after 10 steps, resumed by dp x tp, gives the
// uninterrupted run's weights. Compressed gradients (int8, after 5 exact steps) keep every
// rank's weights identical and follow the exact run's loss.
TEST(TensorParallel, ZeroAndCompressionShardEachSliceOverItsReplicas) {
    Communicator& c = world_comm();
    const int p = c.size();
    if (p != 4) GTEST_SKIP() << "dp 2 x tp 2 needs 4 ranks";
    const int tp = 2, B = 2, T = 9;
    std::unique_ptr<Communicator> tp_group = c.split(c.rank() / tp, c.rank());
    std::unique_ptr<Communicator> dp_group = c.split(c.rank() % tp, c.rank());
    const io::GGUFFile file(testing::write_test_model(
        "tp_zero_" + std::to_string(c.rank()), testing::small_model_config("llama", 32, 51)));
    std::mt19937 rng(84);
    std::vector<int32_t> ids(static_cast<size_t>(2) * B * (T + 1));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    auto run = [&](const Sharding& sh) {
        return train_run(file, ids, dp_group->rank() * B, B, T, tp_group.get(), dp_group.get(), sh);
    };
    const Result plain = run({});
    const train::ParamStore start = train::TrainModel(file).params();
    const double bound = testing::rounding_drift_bound(20, longest_sum(file));
    const std::string dir = std::string(SYSLM_TEST_TMP) + "/tp_zero_ck";
    for (int stage : {1, 2}) {
        Sharding sh;
        sh.zero = stage;
        if (stage == 2) sh.save_at_10 = dir;
        const Result z = run(sh);
        EXPECT_LE(relative_drift(plain.weights, z.weights, plain.weights, start), bound)
            << "ZeRO-" << stage;
        EXPECT_NEAR(static_cast<double>(z.state_bytes) / plain.state_bytes, 0.5, 0.02)
            << "ZeRO-" << stage;
    }
    Sharding resume;
    resume.zero = 1;
    resume.resume = dir;
    const Result resumed = run(resume);
    EXPECT_EQ(resumed.losses.size(), 10u);
    EXPECT_LE(relative_drift(plain.weights, resumed.weights, plain.weights, start), bound)
        << "resumed";

    Sharding compressed;
    compressed.compress = Compression::Int8;
    const Result q = run(compressed);
    testing::expect_follows(q.losses, plain.losses, "int8");
    std::vector<float> ref(q.weights.values(), q.weights.values() + q.weights.size());
    std::vector<float> mine = ref;
    c.broadcast(ref.data(), ref.size() * sizeof(float), 0);
    EXPECT_EQ(ref, mine) << "the ranks' gathered weights differ";
    if (c.rank() == 0)
        std::printf("dp 2 x tp 2, int8: final loss %.4f, exact %.4f\n", q.losses.back(),
                    plain.losses.back());
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
}  // namespace syslm::parallel
