// ContextBatch (a cloud's sessions in one forward): every context's logits bit for bit what it
// computes alone, for token rows, several rows with every row's logits (a verify call), residual
// rows entering a layer (a split model's cloud half) and rows stopping at one (its edge half),
// mixed in one run; over several
// steps, so that each context's cache holds what its own forward would have stored. Also a
// sliding-window model (ring caches). Bad items are refused before anything runs.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "../common/model_checks.hpp"
#include "core/error.hpp"
#include "kernels/cpu/matmul.hpp"
#include "model/context_batch.hpp"
#include "model/random_init.hpp"

namespace syslm::model {
namespace {

std::string make_model(const std::string& tag, InitConfig cfg) {
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    const std::string path = std::string(SYSLM_TEST_TMP) + "/batch_" + tag + ".gguf";
    write_random_model(cfg, SYSLM_VOCAB_DIR "/ggml-vocab-llama-spm.gguf", path);
    return path;
}

InitConfig config(const std::string& arch, int window) {
    InitConfig c;
    c.arch = arch;
    c.n_layer = 3;
    c.n_embd = 48;
    c.n_head = 6;
    c.n_head_kv = 2;
    c.n_ff = 72;
    c.n_ctx = 64;
    c.seed = 5;
    c.window = window;
    return c;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_batched_equals_alone(const Model& m) {
    const kernels::ExactSmallBatches exact;  // as the cloud's batcher runs
    const int V = m.hparams().n_vocab;
    const auto tokens = testing::random_tokens(40, V, 3);
    // Three sessions at different positions and a split edge feeding the third kind of item.
    Context a(m, 64, 2), b(m, 64, 2), c(m, 64, 2), edge(m, 64, 2), edge2(m, 64, 2),
        ref_edge(m, 64, 2);
    Context ra(m, 64, 2), rb(m, 64, 2), rc(m, 64, 2);
    const std::span<const int32_t> t(tokens);
    a.forward(t.first(5));
    ra.forward(t.first(5));
    b.forward(t.subspan(5, 11));
    rb.forward(t.subspan(5, 11));
    c.forward_from(2, edge.residual_until(2, t.subspan(16, 7)));
    edge2.residual_until(2, t.subspan(16, 7));
    ref_edge.residual_until(2, t.subspan(16, 7));
    rc.forward(t.subspan(16, 7));
    ContextBatch batch(m, 31, 2);
    for (int step = 0; step < 4; ++step) {
        const auto ta = t.subspan(23 + step, 1), tb = t.subspan(27 + 3 * step, 3);
        const auto tc = t.subspan(23 + step, 2);
        const std::span<const float> rows = edge.residual_until(2, tc);
        const std::vector<float> res(rows.begin(), rows.end());
        std::vector<ContextBatch::Item> items(4);
        items[0].ctx = &a;
        items[0].tokens = ta;
        items[1].ctx = &b;
        items[1].tokens = tb;
        items[1].all_logits = true;
        items[2].ctx = &c;
        items[2].residual = res;
        items[2].first_layer = 2;
        items[3].ctx = &edge2;  // an edge's half: rows up to layer 2
        items[3].tokens = tc;
        items[3].end_layer = 2;
        batch.run(items);
        const auto r2 = ref_edge.residual_until(2, tc);
        EXPECT_TRUE(same_bits(items[3].logits, r2)) << step;
        const auto la = ra.forward(ta);
        EXPECT_TRUE(same_bits(items[0].logits, la)) << step;
        const auto lb = rb.forward(tb, true);
        EXPECT_TRUE(same_bits(items[1].logits, lb)) << step;
        const auto lc = rc.forward(tc);
        EXPECT_TRUE(same_bits(items[2].logits, lc)) << step;
        EXPECT_EQ(a.n_past(), ra.n_past());
        EXPECT_EQ(b.n_past(), rb.n_past());
        EXPECT_EQ(c.n_past(), rc.n_past());
    }
}

TEST(ContextBatch, EachContextComputesWhatItWouldAlone) {
    check_batched_equals_alone(Model(make_model("llama", config("llama", 0))));
}

TEST(ContextBatch, RingCachesToo) {
    check_batched_equals_alone(Model(make_model("window", config("llama", 8))));
}

TEST(ContextBatch, RefusesBadItems) {
    const Model m(make_model("bad", config("llama", 0)));
    const Model other(make_model("other", config("llama", 0)));
    Context a(m, 8, 1), o(other, 8, 1);
    ContextBatch batch(m, 4, 1);
    const std::vector<int32_t> five(5, 1), one(1, 2), bad(1, -1);
    std::vector<ContextBatch::Item> items(1);
    items[0].ctx = &a;
    items[0].tokens = five;
    EXPECT_THROW(batch.run(items), Error);  // more rows than the batch
    items[0].tokens = bad;
    EXPECT_THROW(batch.run(items), Error);
    items[0].ctx = &o;
    items[0].tokens = one;
    EXPECT_THROW(batch.run(items), Error);  // another model
    EXPECT_EQ(a.n_past(), 0);
    const std::vector<int32_t> eight(8, 1);
    a.forward(eight);
    items[0].ctx = &a;
    EXPECT_THROW(batch.run(items), Error);  // full
}

}  // namespace
}  // namespace syslm::model
