// Checkpoint directories that a kill cannot strand (every state a save can be killed in, built by
// hand here; tests/reference/test_train_checkpoint_faults.py kills real runs under strace), files
// whose checksum catches a changed byte, and a training step that stops before a NaN reaches the
// weights.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "../common/random_model.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "train/checkpoint_files.hpp"
#include "train/trainer.hpp"

namespace syslm::train {
namespace {
namespace fs = std::filesystem;

std::string fresh(const std::string& name) {
    const std::string dir = std::string(SYSLM_TEST_TMP) + "/" + name;
    for (const char* suffix : {"", ".tmp", ".old"}) fs::remove_all(dir + suffix);
    fs::create_directories(SYSLM_TEST_TMP);
    return dir;
}

// A directory holding a marker file, and a state.bin that is complete (checksummed) or not.
void make(const std::string& dir, const std::string& marker, bool complete) {
    fs::create_directories(dir);
    std::ofstream(dir + "/marker") << marker;
    ChecksummedWriter w(dir + "/state.bin");
    const char payload[13] = "some state..";
    w.write(payload, sizeof payload);
    if (complete) {
        w.commit();
    } else {  // as a kill before the state's rename leaves it: only the temporary file
        const std::string tmp = dir + "/state.bin.partial";
        std::ofstream(tmp) << "half";
    }
}

std::string marker(const std::string& dir) {
    std::ifstream in(dir + "/marker");
    std::string s;
    in >> s;
    return s;
}

bool exists(const std::string& p) { return fs::exists(p); }

TEST(CheckpointDir, EveryStateASaveCanBeKilledInRecoversTheNewestCompleteCopy) {
    const std::string d = fresh("ck_recover");
    // Nothing at all.
    EXPECT_FALSE(recover_checkpoint(d));
    // Killed while the first .tmp was written: nothing complete.
    make(d + ".tmp", "first", false);
    EXPECT_FALSE(recover_checkpoint(d));
    EXPECT_TRUE(exists(d + ".tmp")) << "nothing is removed when nothing can be recovered";
    // Killed between the renames of the first save (no previous): the complete .tmp.
    fs::remove_all(d + ".tmp");
    make(d + ".tmp", "first", true);
    EXPECT_TRUE(recover_checkpoint(d));
    EXPECT_EQ(marker(d), "first");
    EXPECT_FALSE(exists(d + ".tmp"));
    // Killed while a later .tmp was written: dir stays, the partial .tmp goes.
    make(d + ".tmp", "second", false);
    EXPECT_TRUE(recover_checkpoint(d));
    EXPECT_EQ(marker(d), "first");
    EXPECT_FALSE(exists(d + ".tmp"));
    // Killed after rename(dir, dir.old), .tmp complete: the newer .tmp.
    make(d + ".tmp", "second", true);
    fs::rename(d, d + ".old");
    EXPECT_TRUE(recover_checkpoint(d));
    EXPECT_EQ(marker(d), "second");
    EXPECT_FALSE(exists(d + ".old"));
    EXPECT_FALSE(exists(d + ".tmp"));
    // dir moved aside, .tmp incomplete (a save that began with a stale, partial .tmp): the old.
    make(d + ".tmp", "third", false);
    fs::rename(d, d + ".old");
    EXPECT_TRUE(recover_checkpoint(d));
    EXPECT_EQ(marker(d), "second");
    // Killed after rename(.tmp, dir), before .old was removed.
    make(d + ".old", "older", true);
    EXPECT_TRUE(recover_checkpoint(d));
    EXPECT_EQ(marker(d), "second");
    EXPECT_FALSE(exists(d + ".old"));
}

TEST(CheckpointDir, SwapInNeedsACompleteTmpAndLeavesOnlyTheNewOne) {
    const std::string d = fresh("ck_swap");
    make(d, "old", true);
    make(d + ".tmp", "new", false);
    EXPECT_THROW(swap_in_checkpoint(d), Error);
    EXPECT_EQ(marker(d), "old");
    fs::remove_all(d + ".tmp");
    begin_checkpoint(d);
    EXPECT_TRUE(exists(d + ".tmp"));
    EXPECT_TRUE(fs::is_empty(d + ".tmp"));
    make(d + ".tmp", "new", true);
    swap_in_checkpoint(d);
    EXPECT_EQ(marker(d), "new");
    EXPECT_FALSE(exists(d + ".tmp"));
    EXPECT_FALSE(exists(d + ".old"));
}

TEST(CheckpointFile, EveryChangedByteIsCaughtAndFieldsCannotRunIntoTheChecksum) {
    const std::string path = fresh("ck_file") + ".bin";
    std::vector<float> v(1003);
    std::mt19937 rng(4);
    for (float& x : v) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    {
        ChecksummedWriter w(path);
        w.floats(v);
        w.commit();
    }
    {
        CheckpointReader r(path, true);
        EXPECT_EQ(r.floats("values", 5000), v);
        r.expect_end();
    }
    {
        CheckpointReader r(path, true);
        std::vector<char> all(8 + v.size() * 4 + 1);
        EXPECT_THROW(r.read(all.data(), all.size(), "everything and one byte"), Error);
    }
    std::vector<char> bytes(fs::file_size(path));
    std::ifstream(path, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    for (size_t at : {size_t{0}, size_t{7}, size_t{8}, bytes.size() / 2, bytes.size() - 9,
                      bytes.size() - 1}) {
        std::vector<char> changed = bytes;
        changed[at] ^= 0x10;
        std::ofstream(path, std::ios::binary).write(changed.data(), static_cast<std::streamsize>(changed.size()));
        try {
            CheckpointReader r(path, true);
            ADD_FAILURE() << "byte " << at << " changed and not caught";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        }
    }
}

// A NaN in the weights makes the loss NaN: the step throws before the update, leaving every other
// weight and the optimizer state as they were, and the trainer's step count unchanged.
TEST(Trainer, ANonFiniteLossStopsTheStepBeforeTheUpdate) {
    const std::string path = testing::write_test_model("nan_step", testing::small_model_config("llama", 32, 61));
    const io::GGUFFile file(path);
    TrainModel m(file);
    std::mt19937 rng(9);
    const int B = 2, T = 7;
    std::vector<int32_t> ids(static_cast<size_t>(B) * (T + 1));
    for (auto& x : ids) x = static_cast<int32_t>(rng() % 1000);
    FixedBatch batch(ids, B, T);
    TrainOptions opt;
    opt.B = B;
    opt.T = T;
    opt.steps = 3;
    backend::CpuBackend be(2);
    Trainer t(m, batch, opt, be);
    t.step();  // a good step first: there is optimizer state to keep
    const std::string before_dir = fresh("nan_step_before"), after_dir = fresh("nan_step_after");
    t.save_checkpoint(before_dir, file.metadata(), &file);
    float* w = m.params().value("blk.0.ffn_down.weight");
    const float kept = w[3];
    w[3] = NAN;
    const std::vector<float> before(m.params().values(), m.params().values() + m.params().size());
    try {
        t.step();
        ADD_FAILURE() << "a NaN loss did not stop the step";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("training step 2"), std::string::npos) << e.what();
    }
    for (size_t i = 0; i < before.size(); ++i) {
        if (!std::isnan(before[i])) {
            ASSERT_EQ(m.params().values()[i], before[i]) << i;
        }
    }
    EXPECT_EQ(t.next_step(), 1);
    // The optimizer state and the step are untouched: with the weight put back, a checkpoint is
    // byte for byte the one from before the failed step.
    w[3] = kept;
    t.save_checkpoint(after_dir, file.metadata(), &file);
    auto bytes = [](const std::string& p) {
        std::ifstream in(p, std::ios::binary);
        return std::vector<char>(std::istreambuf_iterator<char>(in), {});
    };
    EXPECT_EQ(bytes(before_dir + "/state.bin"), bytes(after_dir + "/state.bin"));
    EXPECT_EQ(bytes(before_dir + "/model.gguf"), bytes(after_dir + "/model.gguf"));
}

}  // namespace
}  // namespace syslm::train
