// Pipeline parallelism against one process: the model's blocks split over the ranks as stages,
// 4 micro-batches per step under GPipe and under 1F1B, 12 AdamW steps with active clipping: the
// same losses, and every stage's tensors equal to the single process's (up to the order of sums,
// drift.hpp). Runs with 2 and 3 ranks (a 6-block model: 3 + 3 and 2 + 2 + 2 blocks).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "../common/random_model.hpp"
#include "drift.hpp"
#include "core/error.hpp"
#include "parallel/communicator.hpp"
#include "world.hpp"
#include "io/gguf.hpp"
#include "train/pipeline.hpp"
#include "train/trainer.hpp"

namespace syslm::parallel {
namespace {

// Micro-batch k of each step, in turn: rows [first, first + rows) of a set of sequences of T + 1.
struct Micro : train::BatchSource {
    const std::vector<std::vector<int32_t>>* micro = nullptr;
    int first = 0, rows = 0, T = 0, k = 0;
    void next(std::vector<int32_t>& tok, std::vector<int32_t>& tgt) override {
        tok.clear();
        tgt.clear();
        const auto& mb = (*micro)[static_cast<size_t>(k)];
        for (int b = first; b < first + rows; ++b) {
            const int32_t* seq = mb.data() + static_cast<size_t>(b) * (T + 1);
            tok.insert(tok.end(), seq, seq + T);
            tgt.insert(tgt.end(), seq + 1, seq + T + 1);
        }
        k = (k + 1) % static_cast<int>(micro->size());
    }
    std::string position() const override { return "micro"; }
    void seek(const std::string&) override {}
};

// How far a stage's tensors (whole within the stage) stray from the same tensors of one process,
// relative to how far the one process moved them from `start` (drift.hpp).
double stage_drift(const train::ParamStore& stage, const train::ParamStore& whole,
                   const train::ParamStore& start) {
    testing::WeightDrift drift;
    size_t compared = 0;
    for (const train::Param& q : stage.params()) {
        const train::Param* w = whole.find(q.name);
        const train::Param* s0 = start.find(q.name);
        EXPECT_TRUE(w && s0 && w->ne == q.ne) << q.name;
        if (!w || !s0 || w->ne != q.ne) continue;
        drift.add(stage.values() + q.offset, whole.values() + w->offset,
                  whole.values() + w->offset, start.values() + s0->offset,
                  static_cast<size_t>(q.numel));
        ++compared;
    }
    EXPECT_GT(compared, 0u);
    return drift.relative();
}

int64_t longest_sum(const io::GGUFFile& file) {  // the vocabulary's softmax denominator
    return file.tensor("token_embd.weight").ne[1];
}

TEST(Pipeline, BothSchedulesMatchOneProcess) {
    Communicator& c = world_comm();
    const int p = c.size();
    if (p < 2) GTEST_SKIP() << "a pipeline needs two ranks";
    model::InitConfig cfg = testing::small_model_config("llama", 32, 49);
    cfg.n_layer = 6;
    const std::string path = testing::write_test_model("pp_" + std::to_string(c.rank()), cfg);
    const io::GGUFFile file(path);
    const int B = 2, T = 9, m = 4;
    std::mt19937 rng(82);
    std::vector<std::vector<int32_t>> micro(m);
    for (auto& mb : micro) {
        mb.resize(static_cast<size_t>(B) * (T + 1));
        for (auto& v : mb) v = static_cast<int32_t>(rng() % 1000);
    }
    auto options = [&] {
        train::TrainOptions opt;
        opt.B = B;
        opt.T = T;
        opt.steps = 12;
        opt.accum = m;
        opt.clip = 0.5;
        opt.schedule.kind = train::ScheduleKind::Constant;
        opt.schedule.lr = 3e-3f;
        return opt;
    };
    backend::CpuBackend be(1);
    train::TrainModel whole(file);
    const train::ParamStore start = whole.params();
    const int64_t n = longest_sum(file);
    {
        Micro data;
        data.micro = &micro, data.rows = B, data.T = T;
        train::Trainer t(whole, data, options(), be);
        std::vector<double> losses;
        while (!t.done()) losses.push_back(t.step().loss);
        for (auto schedule : {train::PipelineSchedule::GPipe, train::PipelineSchedule::OneFOneB}) {
            const int first = c.rank() * cfg.n_layer / p, end = (c.rank() + 1) * cfg.n_layer / p;
            train::TrainModel stage(file, train::Recompute::None, nullptr, {first, end});
            Micro d2;
            d2.micro = &micro, d2.rows = B, d2.T = T;
            train::TrainOptions opt = options();
            opt.pipeline = &c;
            opt.pipeline_schedule = schedule;
            train::Trainer tp(stage, d2, opt, be);
            const char* name = schedule == train::PipelineSchedule::GPipe ? "gpipe" : "1f1b";
            for (size_t s = 0; s < losses.size(); ++s) {
                const double l = tp.step().loss;
                EXPECT_NEAR(l, losses[s],
                            testing::rounding_drift_bound(static_cast<int>(s) + 1, n) * losses[s])
                    << name << " step " << s;
            }
            EXPECT_LE(stage_drift(stage.params(), whole.params(), start),
                      testing::rounding_drift_bound(static_cast<int>(losses.size()), n))
                << name << ": weights";
            const size_t compared = stage.params().params().size();
            // The stage holds its blocks (9 tensors each) plus the embedding or the head.
            EXPECT_EQ(compared, static_cast<size_t>(9 * (end - first) + (first == 0) +
                                                    2 * (end == cfg.n_layer)));
            EXPECT_GT(tp.bubble(), 0.0) << name;
            EXPECT_LT(tp.bubble(), 1.0) << name;
        }
    }
}

// 3D: dp x tp x pp with tp = pp = 2 (4 ranks: dp 1; 8 ranks: dp 2), ranks laid out as
// (pp_index x dp + dp_index) x tp + tp_index, against one process accumulating the same
// micro-batches of the whole global batch.
TEST(ThreeD, DataTensorPipelineMatchesOneProcess) {
    Communicator& c = world_comm();
    const int p = c.size();
    if (p % 4 != 0) GTEST_SKIP() << "tp = pp = 2 needs a multiple of 4 ranks";
    const int tp = 2, pp = 2, dp = p / 4, r = c.rank();
    const int tp_i = r % tp, dp_i = r / tp % dp, pp_i = r / (tp * dp);
    std::unique_ptr<Communicator> tp_group = c.split(r / tp, r);
    std::unique_ptr<Communicator> dp_group = c.split(pp_i * tp + tp_i, r);
    std::unique_ptr<Communicator> pp_group = c.split(dp_i * tp + tp_i, r);
    model::InitConfig cfg = testing::small_model_config("llama", 32, 50);
    cfg.n_layer = 4;
    const io::GGUFFile file(testing::write_test_model("3d_" + std::to_string(r), cfg));
    const int B = 2, T = 9, m = 3;
    std::mt19937 rng(83);
    // Micro-batch k of the global batch: dp x B sequences; replica d takes rows d B .. d B + B.
    std::vector<std::vector<int32_t>> micro(m);
    for (auto& mb : micro) {
        mb.resize(static_cast<size_t>(dp) * B * (T + 1));
        for (auto& v : mb) v = static_cast<int32_t>(rng() % 1000);
    }
    auto options = [&](int rows) {
        train::TrainOptions opt;
        opt.B = rows;
        opt.T = T;
        opt.steps = 8;
        opt.accum = m;
        opt.clip = 0.5;
        opt.schedule.kind = train::ScheduleKind::Constant;
        opt.schedule.lr = 3e-3f;
        return opt;
    };
    backend::CpuBackend be(1);
    train::TrainModel whole(file);
    const train::ParamStore start = whole.params();
    const int64_t n = longest_sum(file);
    Micro all;
    all.micro = &micro, all.first = 0, all.rows = dp * B, all.T = T;
    train::Trainer t1(whole, all, options(dp * B), be);
    std::vector<double> losses;
    while (!t1.done()) losses.push_back(t1.step().loss);

    // Plain, and with dp 2 (8 ranks) the optimizer state sharded over each stage's and slice's
    // data-parallel pair (ZeRO-2), and the gradients compressed (int8 after 3 exact steps).
    struct Case {
        int zero;
        Compression compress;
    };
    std::vector<Case> cases{{0, Compression::None}};
    if (dp > 1) cases.insert(cases.end(), {{2, Compression::None}, {0, Compression::Int8}});
    for (const Case& k : cases) {
        const std::string what = "ZeRO-" + std::to_string(k.zero) + ", " + compression_name(k.compress);
        train::TrainModel part(file, train::Recompute::None, tp_group.get(),
                               {pp_i * cfg.n_layer / pp, (pp_i + 1) * cfg.n_layer / pp});
        Micro mine;
        mine.micro = &micro, mine.first = dp_i * B, mine.rows = B, mine.T = T;
        train::TrainOptions opt = options(B);
        opt.pipeline = pp_group.get();
        opt.data_parallel = dp > 1 ? dp_group.get() : nullptr;
        opt.zero = k.zero;
        opt.grad_compress = k.compress;
        opt.compress_warmup = 3;
        train::Trainer t3(part, mine, opt, be);
        double last = 0;
        for (size_t s = 0; s < losses.size(); ++s) {
            last = t3.step().loss;
            if (k.compress == Compression::None) {
                EXPECT_NEAR(last, losses[s],
                            testing::rounding_drift_bound(static_cast<int>(s) + 1, n) * losses[s])
                    << what << " step " << s;
            }
        }
        const train::ParamStore stage = part.params().gathered(*tp_group);  // this stage, whole
        if (k.compress != Compression::None) {  // follows the loss; replicas stay identical
            std::vector<double> compressed = losses;
            compressed.back() = last;
            testing::expect_follows(compressed, losses, what);
            std::vector<float> ref(stage.values(), stage.values() + stage.size());
            const std::vector<float> own = ref;
            dp_group->broadcast(ref.data(), ref.size() * sizeof(float), 0);
            EXPECT_EQ(ref, own) << what << ": the replicas' weights differ";
            continue;
        }
        EXPECT_LE(stage_drift(stage, whole.params(), start),
                  testing::rounding_drift_bound(static_cast<int>(losses.size()), n))
            << what << ": weights";
    }
}

}  // namespace
}  // namespace syslm::parallel
