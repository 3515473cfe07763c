// Training a model whose layers share blocks: a shared tensor's gradient is the sum of the
// gradients its layers would have as separate copies (the unshared file, convert --unshare),
// with and without activation recompute; pipeline stages that would split a shared block are
// refused. (Against PyTorch autograd with tied modules: tests/reference/test_shared_blocks.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../common/random_model.hpp"
#include "backend/cpu_backend.hpp"
#include "core/error.hpp"
#include "model/shared_blocks.hpp"
#include "train/train_model.hpp"

namespace syslm::train {
namespace {

TEST(SharedBlocks, GradientsSumOverTheLayersThatShare) {
    model::InitConfig c = testing::small_model_config("llama", 64, 17);
    c.n_layer = 5;
    c.block_source = model::shared_blocks("2:sequence", c.n_layer);  // {0, 0, 0, 3, 3}
    const std::string shared = testing::write_test_model("train_shared", c);
    const std::string unshared = std::string(SYSLM_TEST_TMP) + "/train_shared_unshared.gguf";
    model::unshare_blocks(io::GGUFFile(shared), unshared);
    const io::GGUFFile fs(shared), fu(unshared);
    const int B = 2, T = 11;
    const std::vector<int32_t> ids = testing::random_ids(size_t(B) * (T + 1), 9);
    std::vector<int32_t> tok, tgt;
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            tok.push_back(ids[size_t(b) * (T + 1) + t]);
            tgt.push_back(ids[size_t(b) * (T + 1) + t + 1]);
        }
    backend::CpuBackend be(2);
    TrainModel u(fu);
    u.params().zero_grads();
    const double loss_u = u.forward_backward(tok, tgt, B, T, be);

    for (Recompute rc : {Recompute::None, Recompute::Full}) {
        TrainModel s(fs, rc);
        EXPECT_LT(s.params().size(), u.params().size());
        s.params().zero_grads();
        const double loss_s = s.forward_backward(tok, tgt, B, T, be);
        EXPECT_NEAR(loss_s, loss_u, 1e-6 * loss_u);
        int checked = 0;
        for (const Param& p : s.params().params()) {
            std::vector<std::string> uses{p.name};
            if (p.name.starts_with("blk.")) {
                const int b = std::stoi(p.name.substr(4));
                const std::string rest = p.name.substr(p.name.find('.', 4));
                for (int il = 0; il < c.n_layer; ++il)
                    if (il != b && c.block_source[il] == b)
                        uses.push_back("blk." + std::to_string(il) + rest);
            }
            // The copies' gradients added in float: each term's rounding, a few ulps of the sum
            // of magnitudes.
            const float* g = s.params().grad(p.name);
            double worst = 0, scale = 0;
            for (int64_t i = 0; i < p.numel; ++i) {
                double want = 0, mag = 0;
                for (const std::string& n : uses) {
                    want += u.params().grad(n)[i];
                    mag += std::fabs(u.params().grad(n)[i]);
                }
                worst = std::max(worst, std::fabs(g[i] - want) / (mag + 1e-30));
                scale = std::max(scale, mag);
            }
            EXPECT_GT(scale, 0) << p.name;
            EXPECT_LT(worst, 1e-4) << p.name << " used by " << uses.size() << " layers";
            checked += uses.size() > 1;
        }
        EXPECT_EQ(checked, 2 * 9);  // blocks 0 and 3, nine tensors each
    }
}

TEST(SharedBlocks, PipelineStagesMustNotSplitASharedBlock) {
    model::InitConfig c = testing::small_model_config("llama", 64, 17);
    c.n_layer = 4;
    c.block_source = model::shared_blocks("2", c.n_layer);  // {0, 1, 0, 1}
    const io::GGUFFile f(testing::write_test_model("train_shared_pipeline", c));
    EXPECT_THROW(TrainModel(f, Recompute::None, nullptr, {2, 4}), Error);
    c.block_source = model::shared_blocks("2:sequence", c.n_layer);  // {0, 0, 2, 2}
    const io::GGUFFile g(testing::write_test_model("train_shared_pipeline_seq", c));
    TrainModel second(g, Recompute::None, nullptr, {2, 4});
    EXPECT_TRUE(second.params().find("blk.2.attn_q.weight"));
    EXPECT_FALSE(second.params().find("blk.0.attn_q.weight"));
}

}  // namespace
}  // namespace syslm::train
