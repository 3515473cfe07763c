// Pipeline parallelism against one process: the model's blocks split over the ranks as stages,
// 4 micro-batches per step under GPipe and under 1F1B, 12 AdamW steps with active clipping: the
// same losses, and every stage's tensors equal to the single process's (1e-5). Runs with 2 and 3
// ranks (a 6-block model: 3 + 3 and 2 + 2 + 2 blocks).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../common/random_model.hpp"
#include "core/error.hpp"
#include "dist/communicator.hpp"
#include "io/gguf.hpp"
#include "train/pipeline.hpp"
#include "train/trainer.hpp"

namespace syslm::dist {
namespace {

Communicator& world_comm() {
    static std::unique_ptr<Communicator> w = world();
    return *w;
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
    std::vector<int32_t> ids(static_cast<size_t>(m) * B * (T + 1));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    // m micro-batches, one after the other, every step.
    struct Batches : train::BatchSource {
        std::vector<int32_t> ids;
        int B, T, m, next_k = 0;
        void next(std::vector<int32_t>& tok, std::vector<int32_t>& tgt) override {
            tok.clear();
            tgt.clear();
            for (int b = 0; b < B; ++b) {
                const int32_t* seq = ids.data() + (static_cast<size_t>(next_k) * B + b) * (T + 1);
                tok.insert(tok.end(), seq, seq + T);
                tgt.insert(tgt.end(), seq + 1, seq + T + 1);
            }
            next_k = (next_k + 1) % m;
        }
        std::string position() const override { return "micro"; }
        void seek(const std::string&) override {}
    };
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
    ThreadPool pool(1);
    train::TrainModel whole(file);
    {
        Batches data;
        data.ids = ids, data.B = B, data.T = T, data.m = m;
        train::Trainer t(whole, data, options(), pool);
        std::vector<double> losses;
        while (!t.done()) losses.push_back(t.step().loss);
        for (auto schedule : {train::PipelineSchedule::GPipe, train::PipelineSchedule::OneFOneB}) {
            const int first = c.rank() * cfg.n_layer / p, end = (c.rank() + 1) * cfg.n_layer / p;
            train::TrainModel stage(file, train::Recompute::None, nullptr, {first, end});
            Batches d2;
            d2.ids = ids, d2.B = B, d2.T = T, d2.m = m;
            train::TrainOptions opt = options();
            opt.pipeline = &c;
            opt.pipeline_schedule = schedule;
            train::Trainer tp(stage, d2, opt, pool);
            const char* name = schedule == train::PipelineSchedule::GPipe ? "gpipe" : "1f1b";
            for (size_t s = 0; s < losses.size(); ++s) {
                const double l = tp.step().loss;
                EXPECT_NEAR(l, losses[s], 1e-5 * std::fabs(losses[s])) << name << " step " << s;
            }
            float worst = 0;
            size_t compared = 0;
            for (const train::Param& q : stage.params().params()) {
                const train::Param* w = whole.params().find(q.name);
                ASSERT_TRUE(w) << q.name;
                for (int64_t i = 0; i < q.numel; ++i)
                    worst = std::max(worst, std::fabs(stage.params().values()[q.offset + i] -
                                                      whole.params().values()[w->offset + i]));
                ++compared;
            }
            EXPECT_LE(worst, 1e-5f) << name << ": largest weight difference";
            // The stage holds its blocks (9 tensors each) plus the embedding or the head.
            EXPECT_EQ(compared, static_cast<size_t>(9 * (end - first) + (first == 0) +
                                                    2 * (end == cfg.n_layer)));
            EXPECT_GT(tp.bubble(), 0.0) << name;
            EXPECT_LT(tp.bubble(), 1.0) << name;
        }
    }
}

}  // namespace
}  // namespace syslm::dist
