// Hidden-state matching in distillation: the teacher's captured residual is the stream its logits
// come from; the term's gradient (student weights and the learned projection) against central
// finite differences of the loss; the trainer keeps the projections out of the exported model and
// resumes them from checkpoints exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "../common/random_model.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "train/teacher.hpp"
#include "train/trainer.hpp"

namespace syslm::train {
namespace {

using testing::random_ids;

TEST(HiddenDistill, LayerMapSpreadsBlocksAtTheSameDepth) {
    using P = std::vector<std::pair<int, int>>;
    EXPECT_EQ(hidden_layer_map(6, 12, 1), (P{{5, 11}}));
    EXPECT_EQ(hidden_layer_map(3, 6, 3), (P{{0, 1}, {1, 3}, {2, 5}}));
    EXPECT_EQ(hidden_layer_map(4, 2, 2), (P{{1, 0}, {3, 1}}));
    EXPECT_EQ(hidden_layer_map(5, 7, 2), (P{{2, 3}, {4, 6}}));
    EXPECT_THROW(hidden_layer_map(3, 6, 4), Error);
    EXPECT_THROW(hidden_layer_map(3, 6, 0), Error);
}

// The residual after the last block, through the output norm and head, gives the logits.
TEST(HiddenDistill, TeacherResidualOfTheLastBlockGivesItsLogits) {
    model::InitConfig c = testing::small_model_config("llama", 32, 5);
    c.n_layer = 3;
    const std::string path = testing::write_test_model("hidden_teacher", c);
    const int B = 2, T = 11, E = c.n_embd;
    Teacher teacher(path, T, 2);
    const std::vector<int32_t> tokens = random_ids(static_cast<size_t>(B) * T, 3);
    const int V = teacher.n_vocab();
    std::vector<float> logits(static_cast<size_t>(B) * T * V), hidden(2 * B * T * E);
    const std::vector<int> layers = {2, 0};
    teacher.logits(tokens, B, T, logits.data(), layers, hidden.data());

    const io::GGUFFile file(path);
    TrainModel ref(file);  // the f32 weights
    const float* norm = ref.params().value("output_norm.weight");
    const float* out = ref.params().value("output.weight");
    ASSERT_TRUE(norm && out);
    for (int r = 0; r < B * T; ++r) {
        const float* h = hidden.data() + static_cast<size_t>(r) * E;  // slot 0: block 2
        double ss = 0;
        for (int i = 0; i < E; ++i) ss += static_cast<double>(h[i]) * h[i];
        const double inv = 1.0 / std::sqrt(ss / E + ref.hparams().norm_eps);
        for (int v = 0; v < V; v += 37) {
            double z = 0;
            for (int i = 0; i < E; ++i) z += h[i] * inv * norm[i] * out[static_cast<size_t>(v) * E + i];
            ASSERT_NEAR(logits[static_cast<size_t>(r) * V + v], z, 2e-3) << "row " << r << " v " << v;
        }
    }
    // Slot 1 (block 0) is another stream: the capture follows the listed order.
    double diff = 0;
    for (int i = 0; i < B * T * E; ++i)
        diff += std::fabs(hidden[static_cast<size_t>(i)] - hidden[static_cast<size_t>(B * T * E + i)]);
    EXPECT_GT(diff, 1.0);
}

// d(hidden term)/dw for a student matrix, the embedding and both projections, against central
// differences of the loss. The hidden term is isolated as the difference of two runs, with and
// without teacher hidden states, so the cross-entropy's rounding does not swamp it.
TEST(HiddenDistill, GradientMatchesFiniteDifferences) {
    model::InitConfig c = testing::small_model_config("llama", 32, 9);
    c.n_layer = 3;
    const std::string path = testing::write_test_model("hidden_student", c);
    const io::GGUFFile file(path);
    TrainModel m(file);
    const int D = 40, B = 2, T = 9;
    m.match_hidden({0, 2}, D, 17);
    const int64_t R = static_cast<int64_t>(B) * T, V = m.hparams().n_vocab;
    std::mt19937 rng(4);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> teacher_hidden(2 * R * D), teacher_logits(R * V);
    for (float& v : teacher_hidden) v = nd(rng);
    for (float& v : teacher_logits) v = nd(rng);
    FixedBatch batch(random_ids(static_cast<size_t>(B) * (T + 1), 8), B, T);
    std::vector<int32_t> tok, tgt;
    batch.next(tok, tgt);
    backend::CpuBackend be(2);
    const float weight = 20.0f;  // a term large enough that float rounding is far below it
    TrainModel::Distill with{teacher_logits.data(), 0.5f, 2.0f};
    with.teacher_hidden = teacher_hidden.data();
    with.hidden_weight = weight;
    const TrainModel::Distill without{teacher_logits.data(), 0.5f, 2.0f};

    ParamStore& ps = m.params();
    auto hidden_term = [&] {
        const double a = m.forward_backward(tok, tgt, B, T, be, 1.0f, &with);
        const double b = m.forward_backward(tok, tgt, B, T, be, 1.0f, &without);
        return a - b;
    };
    ps.zero_grads();
    m.forward_backward(tok, tgt, B, T, be, 1.0f, &with);
    std::vector<float> g_with(ps.grads(), ps.grads() + ps.size());
    ps.zero_grads();
    m.forward_backward(tok, tgt, B, T, be, 1.0f, &without);
    std::vector<float> g(ps.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = g_with[i] - ps.grads()[i];
    // The projections are only in the hidden term: without it, they get no gradient.
    for (const char* name : {"distill.hidden.0.weight", "distill.hidden.2.weight"}) {
        const Param* p = ps.find(name);
        ASSERT_TRUE(p && p->auxiliary) << name;
        for (int64_t i = 0; i < p->numel; ++i) ASSERT_EQ(ps.grads()[p->offset + i], 0.0f);
    }
    EXPECT_GT(hidden_term(), 0.1);

    int checked = 0;
    for (const char* name : {"distill.hidden.0.weight", "distill.hidden.2.weight",
                             "blk.0.attn_q.weight", "blk.1.ffn_down.weight", "blk.2.attn_v.weight",
                             "token_embd.weight"}) {
        const Param* p = ps.find(name);
        ASSERT_NE(p, nullptr) << name;
        std::vector<int64_t> idx;
        if (std::string(name) == "token_embd.weight") {  // rows of tokens the batch uses
            for (int k = 0; k < 4; ++k) idx.push_back(static_cast<int64_t>(tok[k * 3]) * c.n_embd + k * 7);
        } else {
            // The largest gradients, so the check is not of noise around zero.
            std::vector<int64_t> order(static_cast<size_t>(p->numel));
            for (int64_t i = 0; i < p->numel; ++i) order[i] = i;
            std::partial_sort(order.begin(), order.begin() + 4, order.end(), [&](int64_t x, int64_t y) {
                return std::fabs(g[p->offset + x]) > std::fabs(g[p->offset + y]);
            });
            idx.assign(order.begin(), order.begin() + 4);
        }
        for (int64_t i : idx) {
            float& w = ps.values()[p->offset + i];
            const float w0 = w, h = 5e-3f;
            w = w0 + h;
            const double up = hidden_term();
            w = w0 - h;
            const double down = hidden_term();
            w = w0;
            const double fd = (up - down) / (2.0 * h);
            const double an = g[p->offset + i];
            EXPECT_NEAR(an, fd, 1e-2 * std::fabs(fd) + 1e-5) << name << " [" << i << "]";
            ++checked;
        }
    }
    EXPECT_EQ(checked, 24);
}

TEST(HiddenDistill, TrainerExportsTheModelOnlyAndResumesTheProjectionsExactly) {
    model::InitConfig tc = testing::small_model_config("llama", 32, 21);
    tc.n_layer = 4;
    tc.n_embd = 64;
    tc.n_head = 4;
    tc.n_head_kv = 2;
    const std::string teacher_path = testing::write_test_model("hidden_trainer_teacher", tc);
    const std::string student_path =
        testing::write_test_model("hidden_trainer_student", testing::small_model_config("llama", 32, 22));
    const int B = 2, T = 12;
    const std::vector<int32_t> ids = random_ids(static_cast<size_t>(B) * (T + 1), 5);
    backend::CpuBackend be(2);
    Teacher teacher(teacher_path, T, 2);
    const io::GGUFFile file(student_path);

    auto options = [&] {
        TrainOptions opt;
        opt.B = B;
        opt.T = T;
        opt.steps = 6;
        opt.schedule.kind = ScheduleKind::Constant;
        opt.schedule.lr = 3e-3f;
        opt.teacher = &teacher;
        opt.distill_hidden = 1.0f;
        for (const auto& [s, t] : hidden_layer_map(2, teacher.n_layer(), 2)) opt.teacher_layers.push_back(t);
        return opt;
    };
    auto student = [&] {
        auto m = std::make_unique<TrainModel>(file);
        std::vector<int> s;
        for (const auto& [sl, t] : hidden_layer_map(2, teacher.n_layer(), 2)) s.push_back(sl);
        m->match_hidden(s, teacher.n_embd(), 99);
        return m;
    };

    // Uninterrupted: six steps; the loss (with the hidden term) falls.
    auto full = student();
    FixedBatch data_full(ids, B, T);
    Trainer t_full(*full, data_full, options(), be);
    std::vector<double> losses;
    while (!t_full.done()) losses.push_back(t_full.step().loss);
    EXPECT_LT(losses.back(), losses.front());

    // Three steps, a checkpoint, a fresh process-like restart, three more.
    const std::string dir = std::string(SYSLM_TEST_TMP) + "/hidden_ckpt";
    {
        auto m = student();
        FixedBatch data(ids, B, T);
        Trainer t(*m, data, options(), be);
        for (int i = 0; i < 3; ++i) t.step();
        t.save_checkpoint(dir, file.metadata(), &file);
    }
    const io::GGUFFile saved(dir + "/model.gguf");
    for (const io::GGUFTensor& t : saved.tensors())
        EXPECT_EQ(t.name.rfind("distill.", 0), std::string::npos) << t.name;
    EXPECT_EQ(saved.tensors().size(), file.tensors().size());
    auto resumed = std::make_unique<TrainModel>(saved);
    std::vector<int> s;
    for (const auto& [sl, t] : hidden_layer_map(2, teacher.n_layer(), 2)) s.push_back(sl);
    resumed->match_hidden(s, teacher.n_embd(), 12345);  // other init: the state overwrites it
    FixedBatch data_r(ids, B, T);
    Trainer t_r(*resumed, data_r, options(), be);
    t_r.load_state(dir);
    while (!t_r.done()) t_r.step();
    const ParamStore& a = full->params();
    const ParamStore& b = resumed->params();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.values()[i], b.values()[i]) << i;

    // A run without the projections refuses that state with a clear error.
    auto plain = std::make_unique<TrainModel>(saved);
    FixedBatch data_p(ids, B, T);
    TrainOptions po = options();
    po.teacher_layers.clear();
    Trainer t_p(*plain, data_p, po, be);
    EXPECT_THROW(t_p.load_state(dir), Error);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace syslm::train
