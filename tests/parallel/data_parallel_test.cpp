// Data parallel: the bucketed reducer sums every bucket over the group whatever order the
// backward makes them ready in; training on p ranks with B rows each gives the weights one
// process gets with p x B rows (FP32, 20 steps: equal up to the order of sums, drift.hpp), with
// and without gradient accumulation; ZeRO-1 and -2 give plain data parallel's weights with 1/p
// of the optimizer state per rank, and their sharded checkpoints resume at another world size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "../common/random_model.hpp"
#include "backend/cpu_backend.hpp"
#include "drift.hpp"
#include "io/gguf.hpp"
#include "parallel/communicator.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/grad_compress.hpp"
#include "train/trainer.hpp"
#include "world.hpp"

namespace syslm::parallel {
namespace {

TEST(GradientReducer, SumsEveryBucketInAnyReadyOrder) {
    Communicator& c = world_comm();
    const size_t n = 10007;
    std::vector<GradientReducer::Bucket> buckets;
    for (size_t at = 0; at < n;) {  // uneven bucket sizes, one empty
        const size_t len = buckets.size() == 2 ? 0 : 500 + 397 * buckets.size();
        buckets.push_back({at, std::min(n, at + len)});
        at = buckets.back().end;
    }
    GradientReducer red(c, buckets);
    for (int step = 0; step < 3; ++step) {
        std::vector<float> g(n), want(n, 0.0f);
        for (int r = 0; r < c.size(); ++r) {
            std::mt19937 rng(static_cast<uint32_t>(r * 31 + step));
            std::uniform_real_distribution<float> u(-1, 1);
            for (size_t i = 0; i < n; ++i) {
                const float v = u(rng);
                if (r == c.rank()) g[i] = v;
                want[i] += v;
            }
        }
        red.start(g.data());
        for (size_t b = buckets.size(); b-- > 0;) red.ready(b);  // last first, as a backward does
        red.finish();
        // p <= 8 terms in [-1, 1] summed in another order: at most 2 * p * 2^-24 apart.
        for (size_t i = 0; i < n; ++i) ASSERT_NEAR(g[i], want[i], 1e-5) << i;
    }
    if (c.size() > 1) {
        EXPECT_GT(red.comm_seconds(), 0.0);
    }
    EXPECT_GE(red.overlap(), 0.0);
    EXPECT_LE(red.overlap(), 1.0);
}

struct TrainRun {
    std::vector<float> weights;
    std::vector<float> weights_before_save, weights_after_save;  // at save_at_10
    std::vector<double> losses;
    size_t state_bytes = 0;
};

struct TrainSetup {
    int accum = 1, zero = 0;
    bool keep_zeros = false;
    Compression compress = Compression::None;
    int64_t compress_warmup = 0;
    train::OptimizerKind optimizer = train::OptimizerKind::AdamW;
    float lr = 3e-3f;
    int steps = 20;
    std::string save_at_10;  // checkpoint directory written after step 10
    std::string resume;      // checkpoint to continue from
};

// Trains on the rows [first, first + rows) of the global batch.
TrainRun train(const std::string& path, const std::vector<int32_t>& ids, int first, int rows, int T,
               int accum, Communicator* dp, const TrainSetup& setup = {}) {
    const io::GGUFFile file(setup.resume.empty() ? path : setup.resume + "/model.gguf");
    train::TrainModel m(file);
    std::vector<int32_t> mine(ids.begin() + static_cast<ptrdiff_t>(first) * (T + 1),
                              ids.begin() + static_cast<ptrdiff_t>(first + rows) * (T + 1));
    train::FixedBatch batch(mine, rows, T);
    train::TrainOptions opt;
    opt.B = rows;
    opt.T = T;
    opt.steps = setup.steps;
    opt.accum = accum;
    opt.zero = setup.zero;
    opt.grad_compress = setup.compress;
    opt.compress_warmup = setup.compress_warmup;
    opt.keep_zeros = setup.keep_zeros;
    opt.clip = 1.0;
    opt.schedule.kind = train::ScheduleKind::Cosine;
    opt.schedule.lr = setup.lr;
    opt.optimizer.kind = setup.optimizer;
    opt.schedule.warmup = 3;
    opt.data_parallel = dp;
    backend::CpuBackend be(1);
    train::Trainer t(m, batch, opt, be);
    if (!setup.resume.empty()) t.load_state(setup.resume);
    TrainRun r;
    while (!t.done()) {
        r.losses.push_back(t.step().loss);
        if (!setup.save_at_10.empty() && t.next_step() == 10) {
            const float* v = m.params().values();
            r.weights_before_save.assign(v, v + m.params().size());
            t.save_checkpoint(setup.save_at_10, file.metadata(), &file);
            r.weights_after_save.assign(v, v + m.params().size());
        }
    }
    r.weights.assign(m.params().values(), m.params().values() + m.params().size());
    r.state_bytes = t.optimizer_state_bytes();
    return r;
}

// The model's weights before training, in ParamStore order (as TrainRun::weights).
std::vector<float> initial_weights(const std::string& path) {
    const io::GGUFFile file(path);
    train::TrainModel m(file);
    return {m.params().values(), m.params().values() + m.params().size()};
}

// How far run b strays from run a, relative to how far a moved from `start` (drift.hpp).
double relative_drift(const TrainRun& a, const TrainRun& b, const std::vector<float>& start) {
    EXPECT_EQ(a.weights.size(), b.weights.size());
    EXPECT_EQ(a.weights.size(), start.size());
    testing::WeightDrift drift;
    drift.add(a.weights.data(), b.weights.data(), a.weights.data(), start.data(),
              std::min({a.weights.size(), b.weights.size(), start.size()}));
    return drift.relative();
}

// The longest reduction of the model at `path`: its vocabulary's softmax denominator.
int64_t longest_sum(const std::string& path) {
    return io::GGUFFile(path).tensor("token_embd.weight").ne[1];
}

void check_equivalence(int accum, const std::string& arch = "llama") {
    Communicator& c = world_comm();
    const int p = c.size(), B = 2, T = 11;
    const std::string path = testing::write_test_model(
        "dp_equiv_" + arch + std::to_string(c.rank()), testing::small_model_config(arch, 32, 41));
    std::mt19937 rng(77);
    std::vector<int32_t> ids(static_cast<size_t>(p) * B * (T + 1));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    const TrainRun one = train(path, ids, 0, p * B, T, accum, nullptr);  // 1 process, p x B
    const TrainRun dp = train(path, ids, c.rank() * B, B, T, accum, p > 1 ? &c : nullptr);
    ASSERT_EQ(one.weights.size(), dp.weights.size());
    const int64_t n = longest_sum(path);
    EXPECT_LE(relative_drift(one, dp, initial_weights(path)), testing::rounding_drift_bound(20, n))
        << "weights after 20 steps";
    ASSERT_EQ(one.losses.size(), dp.losses.size());
    for (size_t s = 0; s < one.losses.size(); ++s)
        EXPECT_NEAR(one.losses[s], dp.losses[s],
                    testing::rounding_drift_bound(static_cast<int>(s) + 1, n) * one.losses[s])
            << "step " << s;
    EXPECT_LT(dp.losses.back(), dp.losses.front());
}

TEST(DataParallel, RanksWithBRowsEqualOneProcessWithPTimesBRows) {
    check_equivalence(1);
}
TEST(DataParallel, SameWithGradientAccumulation) {
    check_equivalence(2);
}
// A shared block's buckets are reduced when its own layer's backward ends, after its later uses.
TEST(DataParallel, SameWithSharedBlocks) {
    check_equivalence(1, "llama_shared");
}

TEST(Zero, StagesOneAndTwoGivePlainDataParallelWeightsWithAPthOfTheState) {
    Communicator& c = world_comm();
    const int p = c.size(), B = 2, T = 9;
    if (p == 1) GTEST_SKIP() << "ZeRO shards over more than one rank";
    const std::string path = testing::write_test_model(
        "zero_" + std::to_string(c.rank()), testing::small_model_config("llama", 32, 43));
    std::mt19937 rng(78);
    std::vector<int32_t> ids(static_cast<size_t>(p) * B * (T + 1));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    const TrainRun plain = train(path, ids, c.rank() * B, B, T, 1, &c);
    const double bound = testing::rounding_drift_bound(20, longest_sum(path));
    for (int stage : {1, 2}) {
        TrainSetup s;
        s.zero = stage;
        const TrainRun z = train(path, ids, c.rank() * B, B, T, 1, &c, s);
        EXPECT_LE(relative_drift(plain, z, initial_weights(path)), bound) << "ZeRO-" << stage;
        // AdamW keeps two moments: p ranks hold 1/p of them each (within a bucket's rounding).
        const double share = static_cast<double>(z.state_bytes) / plain.state_bytes;
        EXPECT_NEAR(share, 1.0 / p, 0.02) << "ZeRO-" << stage << " state " << z.state_bytes;
    }
}

// Compressed reductions with error feedback train like the exact one, on a run that memorises
// its batch in 20 steps: int8 under SGD (momentum 0.9) and int8, top-k and sign under AdamW keep
// the exact run's progress (drift.hpp, expect_follows). AdamW divides by the root of the second
// moment, which turns small compression errors in small-gradient coordinates into full-size
// steps, so it starts with exact steps (5, as 1-bit Adam's warm-up). The KJV benchmark
// (bench/parallel/bench_grad_compress.py) measures how close they come on real text. Every rank
// ends with the same weights (compressed updates), the optimizer state is sharded (1/p per rank,
// with or without
// --zero), and a checkpoint holds the exact weights.
TEST(GradCompressTraining, FollowsTheUncompressedLoss) {
    Communicator& c = world_comm();
    const int p = c.size(), B = 2, T = 9;
    if (p == 1) GTEST_SKIP() << "compression applies to reductions over several ranks";
    const std::string path = testing::write_test_model(
        "compress_" + std::to_string(c.rank()), testing::small_model_config("llama", 32, 45));
    std::mt19937 rng(80);
    std::vector<int32_t> ids(static_cast<size_t>(p) * B * (T + 1));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    struct Case {
        train::OptimizerKind optimizer;
        Compression kind;
        int zero = 0;
    };
    const Case cases[] = {{train::OptimizerKind::Sgd, Compression::Int8},
                          {train::OptimizerKind::AdamW, Compression::Int8, 2},
                          {train::OptimizerKind::AdamW, Compression::TopK},
                          {train::OptimizerKind::AdamW, Compression::Sign, 1}};
    for (const Case& k : cases) {
        const bool adam = k.optimizer == train::OptimizerKind::AdamW;
        TrainSetup base;
        base.optimizer = k.optimizer;
        base.lr = adam ? 3e-3f : 0.3f;
        const TrainRun plain = train(path, ids, c.rank() * B, B, T, 1, &c, base);
        TrainSetup s = base;
        s.compress = k.kind;
        s.compress_warmup = adam ? 5 : 0;
        s.zero = k.zero;
        s.save_at_10 = std::string(SYSLM_TEST_TMP) + "/compress_ck_np" + std::to_string(p);
        const TrainRun r = train(path, ids, c.rank() * B, B, T, 1, &c, s);
        const std::string what = std::string(compression_name(k.kind)) + (adam ? " adamw" : " sgd");
        testing::expect_follows(r.losses, plain.losses, what);
        EXPECT_LT(r.losses.back(), r.losses.front()) << what;
        std::vector<float> ref = r.weights;
        c.broadcast(ref.data(), ref.size() * sizeof(float), 0);
        EXPECT_EQ(ref, r.weights) << what << ": the ranks' weights differ";
        EXPECT_NEAR(static_cast<double>(r.state_bytes) / plain.state_bytes, 1.0 / p, 0.02) << what;
        // The checkpoint written after step 10 holds the owners' exact weights: saving made
        // every rank's weights exact (they had trailed by what the compression had not carried
        // yet) and wrote those.
        const io::GGUFFile saved(s.save_at_10 + "/model.gguf");
        train::TrainModel at10(saved);
        EXPECT_TRUE(std::equal(r.weights_after_save.begin(), r.weights_after_save.end(),
                               at10.params().values()))
            << what;
        EXPECT_NE(r.weights_before_save, r.weights_after_save) << what;
        // Resumed from that checkpoint by the same ranks: the uninterrupted run's weights, bit
        // for bit (each rank's error-feedback residual is in the checkpoint).
        TrainSetup again = s;
        again.save_at_10.clear();
        again.resume = s.save_at_10;
        const TrainRun resumed = train(path, ids, c.rank() * B, B, T, 1, &c, again);
        EXPECT_EQ(resumed.losses.size(), 10u) << what;
        EXPECT_EQ(resumed.weights, r.weights) << what << ": resumed";
        c.barrier();  // the next case rewrites the checkpoint
        if (c.rank() == 0)
            std::printf("%s: final loss %.4f, uncompressed %.4f\n", what.c_str(), r.losses.back(),
                        plain.losses.back());
    }
}

// A pruned model's zeros stay zero under compressed data parallel (--keep-zeros): the owners'
// exact weights keep them, and the shared weights get them back after every compressed update.
TEST(GradCompressTraining, KeepsAPrunedModelsZeros) {
    Communicator& c = world_comm();
    const int p = c.size(), B = 2, T = 9;
    if (p == 1) GTEST_SKIP() << "compression applies to reductions over several ranks";
    const std::string dense = testing::write_test_model(
        "compress_zeros_" + std::to_string(c.rank()), testing::small_model_config("llama", 32, 52));
    const io::GGUFFile file(dense);
    train::TrainModel pruned(file);
    std::mt19937 rng(85);
    size_t zeros = 0;
    for (const train::Param& q : pruned.params().params()) {
        if (q.name.rfind("blk.", 0) != 0 || q.ne.size() < 2) continue;
        for (int64_t i = 0; i < q.numel; ++i)
            if (rng() % 2) {
                pruned.params().values()[q.offset + i] = 0.0f;
                ++zeros;
            }
    }
    const std::string path =
        std::string(SYSLM_TEST_TMP) + "/compress_zeros_" + std::to_string(c.rank()) + ".gguf";
    pruned.params().write_gguf(path, file.metadata(), false, &file);
    std::vector<int32_t> ids(static_cast<size_t>(p) * B * (T + 1));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    for (Compression kind : {Compression::Int8, Compression::Sign}) {
        TrainSetup s;
        s.compress = kind;
        s.compress_warmup = 3;
        s.keep_zeros = true;
        const TrainRun r = train(path, ids, c.rank() * B, B, T, 1, &c, s);
        const char* what = compression_name(kind);
        EXPECT_LT(r.losses.back(), r.losses.front()) << what;
        train::TrainModel start{io::GGUFFile(path)};
        size_t kept = 0, moved = 0;
        for (size_t i = 0; i < r.weights.size(); ++i) {
            if (start.params().values()[i] != 0.0f) continue;
            ++kept;
            moved += r.weights[i] != 0.0f;
        }
        EXPECT_GE(kept, zeros) << what;
        EXPECT_EQ(moved, 0u) << what << ": zeros that took a value";
        std::vector<float> ref = r.weights;
        c.broadcast(ref.data(), ref.size() * sizeof(float), 0);
        EXPECT_EQ(ref, r.weights) << what << ": the ranks' weights differ";
    }
}

// Written by p ranks under ZeRO-2 after 10 of 20 steps; finished by one process with the whole
// batch, and by p ranks again under ZeRO-1: both reach their uninterrupted runs' weights.
TEST(Zero, ShardedCheckpointResumesAtAnotherWorldSize) {
    Communicator& c = world_comm();
    const int p = c.size(), B = 2, T = 9;
    if (p == 1) GTEST_SKIP() << "ZeRO shards over more than one rank";
    const std::string path = testing::write_test_model(
        "zero_ck_" + std::to_string(c.rank()), testing::small_model_config("llama", 32, 44));
    const std::string dir = std::string(SYSLM_TEST_TMP) + "/zero_ck_np" + std::to_string(p);
    std::mt19937 rng(79);
    std::vector<int32_t> ids(static_cast<size_t>(p) * B * (T + 1));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    TrainSetup writer;
    writer.zero = 2;
    writer.save_at_10 = dir;
    const TrainRun sharded = train(path, ids, c.rank() * B, B, T, 1, &c, writer);
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        names.push_back(e.path().filename().string());
    EXPECT_EQ(static_cast<int>(names.size()), 2 + p) << "model.gguf, state.bin, one shard per rank";

    TrainSetup resume;
    resume.resume = dir;
    const TrainRun one_done = train(path, ids, 0, p * B, T, 1, nullptr);
    const TrainRun one_resumed = train(path, ids, 0, p * B, T, 1, nullptr, resume);
    const std::vector<float> start = initial_weights(path);
    const double bound = testing::rounding_drift_bound(20, longest_sum(path));
    EXPECT_LE(relative_drift(one_done, one_resumed, start), bound) << "resumed on one process";
    resume.zero = 1;
    const TrainRun again = train(path, ids, c.rank() * B, B, T, 1, &c, resume);
    EXPECT_LE(relative_drift(sharded, again, start), bound) << "resumed on the same ranks, ZeRO-1";
    c.barrier();
}

}  // namespace
}  // namespace syslm::parallel
