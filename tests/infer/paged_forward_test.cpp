// Serving rows (infer/paged_rows.hpp) through model::Forward: several sequences in one forward,
// each over its own pages, one of them starting from another's published prefix pages, give the
// logits each sequence gets alone through model::Context — bit for bit where the sequence's rows
// form the same attention calls, within float rounding where a shared prefix splits its prompt
// — and the same greedy tokens, for dense, GPT-2 and MoE models.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "../common/random_model.hpp"
#include "infer/engine.hpp"
#include "infer/paged_rows.hpp"

namespace syslm::infer {
namespace {

std::string make_model(const std::string& arch) {
    return testing::write_test_model("paged_forward_" + arch,
                                     testing::small_model_config(arch, 64, 21));
}

int32_t argmax(std::span<const float> v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

class PagedForward : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedForward, BatchedSequencesMatchEachAlone) {
    const model::Model m(make_model(GetParam()));
    const int V = m.hparams().n_vocab, steps = 4;
    std::mt19937 rng(5);
    std::vector<std::vector<int32_t>> prompts(3);
    prompts[0].resize(7);
    prompts[1].resize(19);
    for (auto& p : prompts)
        for (auto& t : p) t = static_cast<int32_t>(rng() % V);
    prompts[2] = std::vector<int32_t>(prompts[1].begin(), prompts[1].begin() + 16);
    prompts[2].push_back(3);
    prompts[2].push_back(4);  // shares B's first full page... and its second

    // Alone: prompt, then greedy decode; the logits after each step.
    std::vector<std::vector<std::vector<float>>> alone(3);
    for (size_t s = 0; s < 3; ++s) {
        model::Context ctx(m, 64, 2);
        auto logits = ctx.forward(prompts[s]);
        for (int i = 0; i <= steps; ++i) {
            alone[s].emplace_back(logits.begin(), logits.end());
            const int32_t next = argmax(logits);
            logits = ctx.forward(std::span<const int32_t>(&next, 1));
        }
    }

    // Batched: step 0 runs A's and B's prompts together; B's pages are published; C starts from
    // them and joins in step 1 with its two remaining tokens, beside A's and B's decode tokens.
    // The engine's pool: a local/global model's windowed layer gets a ring of its own pages.
    EngineConfig ec;
    ec.page_size = 8;
    ec.n_pages = 24;
    ec.parallel = 3;
    ec.token_budget = 32;
    ec.n_ctx = 64;
    KvPagesConfig cfg = kv_pages_config(m, ec);
    KvPages pages(cfg);
    EXPECT_EQ(pages.groups(), m.hparams().local_layers.empty() ? 1 : 2);
    model::Forward fwd(m, 64, 2);
    PagedRows rows(pages);
    std::vector<BlockTable> tables(3);
    std::vector<std::vector<int32_t>> tokens = prompts;  // each sequence's tokens so far
    std::vector<int64_t> done(3, 0);                     // positions already in the cache
    std::vector<int> step_of(3, 0);
    // Linear layers' recurrent states per sequence, as the engine keeps them.
    std::vector<std::vector<kernels::LinearState>> linear(
        3, std::vector<kernels::LinearState>(static_cast<size_t>(m.hparams().n_layer)));
    std::vector<float> logits;
    for (int step = 0; step <= steps + 1; ++step) {
        std::vector<int32_t> batch;
        std::vector<int64_t> last_rows;
        std::vector<size_t> which;
        rows.clear();
        for (size_t s = 0; s < 3; ++s) {
            if (s == 2 && step == 0) continue;  // C arrives later
            if (step_of[s] > steps) continue;
            if (s == 2 && step == 1) {
                EXPECT_EQ(pages.match_prefix(tables[2], tokens[2]), 16);
                done[2] = 16;
            }
            const int64_t n = static_cast<int64_t>(tokens[s].size()) - done[s];
            ASSERT_TRUE(pages.append(tables[s], n));
            rows.add(tables[s], done[s], n, {.linear = linear[s].data()});
            batch.insert(batch.end(), tokens[s].begin() + done[s], tokens[s].end());
            last_rows.push_back(static_cast<int64_t>(batch.size()) - 1);
            which.push_back(s);
            done[s] = static_cast<int64_t>(tokens[s].size());
        }
        ASSERT_LT(batch.size(), 32u) << "keep every matmul on the per-row path";
        logits.resize(last_rows.size() * V);
        fwd.run(batch, rows, last_rows, logits.data());
        if (step == 0) pages.publish(tables[1], tokens[1]);
        for (size_t s : which)  // a ring gives back the pages before the window (then C's match
            pages.drop_before(tables[s], done[s] - cfg.window + 1);  // holds only the window's)
        for (size_t i = 0; i < which.size(); ++i) {
            const size_t s = which[i];
            const std::span<const float> got(logits.data() + i * V, V);
            const auto& want = alone[s][static_cast<size_t>(step_of[s])];
            if (s < 2) {
                EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()))
                    << GetParam() << " sequence " << s << " step " << step_of[s];
            } else {
                float worst = 0, scale = 0;
                for (int j = 0; j < V; ++j) {
                    worst = std::max(worst, std::fabs(got[j] - want[j]));
                    scale = std::max(scale, std::fabs(want[j]));
                }
                EXPECT_LE(worst, 1e-4f * scale) << GetParam() << " step " << step_of[s];
            }
            EXPECT_EQ(argmax(got), argmax(want)) << GetParam() << " sequence " << s;
            tokens[s].push_back(argmax(got));
            ++step_of[s];
        }
    }
    for (auto& t : tables) pages.release(t);
    EXPECT_EQ(pages.used_pages(), 0);
}

INSTANTIATE_TEST_SUITE_P(Archs, PagedForward,
                         ::testing::Values("llama", "gpt2", "mixtral", "mixtral_top_p", "qwen3",
                                           "llama_local_global", "llama_local_global_tokens",
                                           "llama_shared", "llama_swish_beta", "llama_linear",
                                           "llama_conv", "bloom", "mpt", "phi3", "gemma2",
                                           "gemma3"));

}  // namespace
}  // namespace syslm::infer
