// Offline distillation: the cache holds exactly the teacher's top-k logits of every window the
// loader serves, a cache of other data / k is refused, and with k = the whole vocabulary a
// training step from the cache equals the step with the teacher run online.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "../common/random_model.hpp"
#include "core/error.hpp"
#include "data/prepare.hpp"
#include "io/gguf.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/teacher.hpp"
#include "train/teacher_cache.hpp"
#include "train/trainer.hpp"

namespace syslm::train {
namespace {

struct Fixture {
    std::string dir, teacher_path, student_path, data;
};

const Fixture& setup() {
    static const Fixture s = [] {
        Fixture x;
        // One directory per process: ctest runs this file's tests as processes side by side.
        x.dir = std::string(SYSLM_TEST_TMP) + "/offline_distill_" + std::to_string(::getpid());
        std::filesystem::remove_all(x.dir);
        std::filesystem::create_directories(x.dir);
        x.teacher_path = testing::write_test_model("od_teacher", testing::small_model_config("llama", 64, 51));
        x.student_path = testing::write_test_model("od_student", testing::small_model_config("llama", 64, 52));
        std::string text;
        for (int i = 0; i < 12; ++i)  // a dozen windows: the k = V cache stays small
            text += "And God said, Let there be light: and there was light " + std::to_string(i) + ".\n";
        std::ofstream(x.dir + "/corpus.txt") << text;
        const io::GGUFFile f(x.teacher_path);
        const auto tok = tokenizer::Tokenizer::from_gguf(f);
        data::PrepareOptions o;
        o.inputs = {x.dir + "/corpus.txt"};
        o.tokenizer_path = x.teacher_path;
        o.out_dir = x.data = x.dir + "/data";
        o.val_fraction = 0;
        data::prepare_data(o, tok);
        return x;
    }();
    return s;
}

TEST(OfflineDistill, CacheHoldsTheTeachersTopK) {
    const Fixture& s = setup();
    const int seq = 16, k = 5;
    Teacher teacher(s.teacher_path, seq, 2);
    const std::string path = s.dir + "/cache.bin";
    build_teacher_cache(path, s.data, s.teacher_path, teacher, seq, k, nullptr);
    const TeacherCache c(path, s.data, s.teacher_path, seq, k, teacher.n_vocab());
    ASSERT_GT(c.n_windows(), 2u);
    // Window 1 recomputed: its tokens from a loader batch with the same layout.
    data::LoaderOptions lo;
    lo.batch = static_cast<int>(c.n_windows());
    lo.seq = seq;
    data::BatchLoader loader(data::split_shard_paths(s.data, "train"), lo);
    const data::Batch& b = loader.next();
    for (int r = 0; r < 3; ++r) {
        const uint64_t w = b.window[static_cast<size_t>(r)];
        std::vector<int32_t> toks(b.row(r), b.row(r) + seq);
        std::vector<float> l(static_cast<size_t>(seq) * teacher.n_vocab());
        teacher.logits(toks, 1, seq, l.data());
        for (int t = 0; t < seq; ++t) {
            const float* row = l.data() + static_cast<size_t>(t) * teacher.n_vocab();
            const float best = *std::max_element(row, row + teacher.n_vocab());
            EXPECT_EQ(c.logits(w)[t * k], best);
            EXPECT_EQ(row[c.ids(w)[t * k + 2]], c.logits(w)[t * k + 2]);
            EXPECT_GE(c.logits(w)[t * k + 1], c.logits(w)[t * k + 2]);
        }
    }
    EXPECT_THROW(TeacherCache(path, s.data, s.teacher_path, seq, k + 1, teacher.n_vocab()), Error);
    EXPECT_THROW(TeacherCache(path, s.data, s.student_path, seq, k, teacher.n_vocab()), Error);
}

TEST(OfflineDistill, FullVocabularyCacheEqualsOnlineTeacher) {
    const Fixture& s = setup();
    const int seq = 12, B = 2;
    Teacher teacher(s.teacher_path, seq, 2);
    const int V = teacher.n_vocab();
    const std::string path = s.dir + "/cache_full.bin";
    build_teacher_cache(path, s.data, s.teacher_path, teacher, seq, V, nullptr);
    const TeacherCache cache(path, s.data, s.teacher_path, seq, V, V);

    std::vector<std::vector<float>> after;
    for (int offline = 0; offline < 2; ++offline) {
        const io::GGUFFile f(s.student_path);
        TrainModel m(f);
        backend::CpuBackend be(2);
        ShardBatches data(s.data, 3, V, B, seq);
        TrainOptions opt;
        opt.B = B;
        opt.T = seq;
        opt.steps = 2;
        opt.distill_alpha = 0.6f;
        opt.distill_temperature = 1.5f;
        if (offline)
            opt.teacher_cache = &cache;
        else
            opt.teacher = &teacher;
        Trainer t(m, data, opt, be);
        while (!t.done()) t.step();
        after.emplace_back(m.params().values(), m.params().values() + m.params().size());
    }
    ASSERT_EQ(after[0].size(), after[1].size());
    double diff = 0;
    for (size_t i = 0; i < after[0].size(); ++i)
        diff = std::max(diff, static_cast<double>(std::fabs(after[0][i] - after[1][i])));
    EXPECT_LT(diff, 1e-6);  // the teacher's logits: F32 cache, same order of sums
}

}  // namespace
}  // namespace syslm::train
