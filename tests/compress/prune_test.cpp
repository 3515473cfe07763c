// Pruning: masks have exactly the requested sparsity / N:M pattern and keep the highest scores;
// Wanda protects columns with large activations; structured pruning's smaller model computes
// the same function as the masked original (GQA: whole KV groups go); fine-tuning with
// keep_zeros keeps the zeros.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../common/model_checks.hpp"
#include "../common/random_model.hpp"
#include "backend/cpu_backend.hpp"
#include "compress/imatrix.hpp"
#include "compress/prune.hpp"
#include "io/gguf.hpp"
#include "kernels/type_traits.hpp"
#include "model/transformer.hpp"
#include "train/trainer.hpp"

namespace syslm::compress {
namespace {

using testing::logits_of;
using testing::max_diff;
using testing::random_tokens;

std::string tmp(const std::string& name) {
    return std::string(SYSLM_TEST_TMP) + "/" + name;
}

std::vector<float> floats(const io::GGUFTensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    kernels::type_traits(t.type).to_float(t.data, v.data(), t.numel());
    return v;
}

struct Fixture {
    std::string path;
    ImportanceMatrix im;
};

// The model of c written as `name`, with its importance matrix on random tokens.
Fixture make_fixture(const std::string& name, const model::InitConfig& c) {
    Fixture x;
    x.path = testing::write_test_model(name, c);
    const model::Model m(x.path);
    ImatrixOptions o;
    o.n_ctx = 48;
    x.im = collect_imatrix(m, random_tokens(96, m.hparams().n_vocab, 3), -1, o);
    return x;
}

const Fixture& gqa_model() {
    static const Fixture f = [] {
        model::InitConfig c = testing::small_model_config("llama", 64, 31);
        c.n_embd = 64;
        c.n_head = 4;  // on 2 KV heads
        c.n_ff = 96;
        return make_fixture("prune_llama", c);
    }();
    return f;
}

TEST(Prune, ExactSparsityKeepingTheHighestScores) {
    const Fixture& f = gqa_model();
    for (PruneScore score : {PruneScore::Magnitude, PruneScore::Wanda}) {
        PruneOptions o;
        o.score = score;
        o.sparsity = 0.37;  // awkward
        o.imatrix = &f.im;
        const std::string out = tmp("pruned_unstructured.gguf");
        const PruneResult r = prune_unstructured(f.path, out, o);
        const io::GGUFFile src(f.path), dst(out);
        const io::GGUFTensor& t = dst.tensor("blk.1.ffn_down.weight");
        const std::vector<float> before = floats(src.tensor(t.name)), after = floats(t);
        const int64_t n = t.ne[0], k = std::llround(0.37 * n);
        const std::vector<float> imp = f.im.importance(t.name, 0, n);
        for (int64_t row = 0; row < t.rows(); ++row) {
            int64_t zeros = 0;
            float min_kept = INFINITY, max_dropped = 0;
            for (int64_t j = 0; j < n; ++j) {
                const float w = before[row * n + j];
                const float s = std::fabs(w) * (score == PruneScore::Wanda ? std::sqrt(imp[j]) : 1);
                if (after[row * n + j] == 0.0f) {
                    ++zeros;
                    max_dropped = std::max(max_dropped, s);
                } else {
                    EXPECT_EQ(after[row * n + j], w);  // kept weights unchanged
                    min_kept = std::min(min_kept, s);
                }
            }
            EXPECT_EQ(zeros, k) << "row " << row;
            EXPECT_LE(max_dropped, min_kept) << "row " << row;
        }
        // Embeddings, norms and the output matrix are not pruned.
        EXPECT_EQ(floats(dst.tensor("token_embd.weight")), floats(src.tensor("token_embd.weight")));
        EXPECT_NEAR(r.sparsity(), 0.37, 0.01);
    }
}

TEST(Prune, TwoFourPatternAndWandaProtectsLargeActivations) {
    const Fixture& f = gqa_model();
    // An importance matrix where column 5 of every matrix carries huge activations.
    ImportanceMatrix im;
    const io::GGUFFile src(f.path);
    for (const auto& [name, e] : f.im.entries()) {
        std::vector<float> x(static_cast<size_t>(e.n_in), 1.0f);
        x[5] = 1000.0f;
        im.add(name, 0, 1, x.data(), 1, e.n_in);
    }
    PruneOptions o;
    o.pattern_n = 2;
    o.pattern_m = 4;
    o.imatrix = &im;
    const std::string out = tmp("pruned_24.gguf");
    prune_unstructured(f.path, out, o);
    const io::GGUFFile dst(out);
    for (const char* name :
         {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", "blk.0.attn_output.weight"}) {
        const io::GGUFTensor& t = dst.tensor(name);
        const std::vector<float> w = floats(t);
        const int64_t n = t.ne[0];
        for (int64_t row = 0; row < t.rows(); ++row) {
            for (int64_t g = 0; g < n; g += 4) {
                int zeros = 0;
                for (int j = 0; j < 4; ++j) zeros += w[row * n + g + j] == 0.0f;
                EXPECT_EQ(zeros, 2) << name << " row " << row << " group " << g;
            }
            EXPECT_NE(w[row * n + 5], 0.0f) << name << ": the salient column was pruned";
        }
    }
}

TEST(Prune, StructuredSmallerModelEqualsMaskedOriginal) {
    const Fixture& f = gqa_model();
    PruneOptions o;
    o.heads = 0.5;  // one of the two KV groups (2 query heads)
    o.ffn = 0.3;
    o.imatrix = &f.im;
    const PruneResult r = prune_structured(f.path, tmp("structured.gguf"), o);
    EXPECT_EQ(r.heads_after, 2);
    EXPECT_EQ(r.kv_heads_after, 1);
    EXPECT_EQ(r.ffn_after, 64);  // 96 - 29 = 67, rounded to a multiple of 32
    EXPECT_LT(r.params_after, r.params_before);
    o.mask_only = true;
    prune_structured(f.path, tmp("structured_mask.gguf"), o);

    const model::Model small(tmp("structured.gguf"));
    EXPECT_EQ(small.hparams().n_head, 2);
    EXPECT_EQ(small.hparams().n_head_kv, 1);
    EXPECT_EQ(small.hparams().head_dim, 16);
    EXPECT_EQ(small.hparams().n_ff, 64);
    const std::vector<int32_t> tokens = random_tokens(30, small.hparams().n_vocab, 8);
    const std::vector<float> a = logits_of(tmp("structured.gguf"), tokens);
    const std::vector<float> b = logits_of(tmp("structured_mask.gguf"), tokens);
    const std::vector<float> orig = logits_of(f.path, tokens);
    double diff = 0, moved = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
        moved = std::max(moved, std::fabs(double(orig[i]) - b[i]));
    }
    EXPECT_LT(diff, 1e-4);
    EXPECT_GT(moved, 1e-3);  // pruning did change the function
}

TEST(Prune, PerMatrixMagnitudeUsesOneThreshold) {
    const Fixture& f = gqa_model();
    PruneOptions o;
    o.score = PruneScore::Magnitude;
    o.sparsity = 0.45;
    o.per_matrix = true;
    prune_unstructured(f.path, tmp("pruned_matrix.gguf"), o);
    const io::GGUFFile src(f.path), dst(tmp("pruned_matrix.gguf"));
    const std::vector<float> before = floats(src.tensor("blk.0.attn_v.weight"));
    const std::vector<float> after = floats(dst.tensor("blk.0.attn_v.weight"));
    int64_t zeros = 0;
    float min_kept = INFINITY, max_dropped = 0;
    for (size_t i = 0; i < after.size(); ++i) {
        if (after[i] == 0.0f) {
            ++zeros;
            max_dropped = std::max(max_dropped, std::fabs(before[i]));
        } else {
            min_kept = std::min(min_kept, std::fabs(before[i]));
        }
    }
    EXPECT_EQ(zeros, std::llround(0.45 * static_cast<double>(after.size())));
    EXPECT_LE(max_dropped, min_kept);
}

TEST(Prune, LayerRemovalEqualsBypass) {
    const Fixture& f = gqa_model();
    const model::Model m(f.path);
    PruneOptions o;
    o.layers = 1;
    o.heads = 0.5;
    o.imatrix = &f.im;
    o.calib_tokens = random_tokens(200, m.hparams().n_vocab, 12);
    o.calib_ctx = 48;
    const PruneResult r = prune_structured(f.path, tmp("layers.gguf"), o);
    ASSERT_EQ(r.removed_layers.size(), 1u);
    o.mask_only = true;
    prune_structured(f.path, tmp("layers_mask.gguf"), o);
    const model::Model small(tmp("layers.gguf"));
    EXPECT_EQ(small.hparams().n_layer, m.hparams().n_layer - 1);
    const std::vector<int32_t> tokens = random_tokens(30, m.hparams().n_vocab, 8);
    const std::vector<float> a = logits_of(tmp("layers.gguf"), tokens);
    const std::vector<float> b = logits_of(tmp("layers_mask.gguf"), tokens);
    double diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    EXPECT_LT(diff, 1e-4);
}

// Removing a layer keeps the other layers' per-layer settings: the local/global pattern and the
// linear layers become one bool per kept layer, and BigBird's draws stay keyed by each layer's
// original index, so the smaller model equals the original with that layer bypassed (masked)
// over a sequence long enough for random blocks to be drawn.
TEST(Prune, LayerRemovalKeepsPerLayerAttention) {
    model::InitConfig c = testing::small_model_config("llama", 128, 41);
    c.n_layer = 4;
    c.window = 6;
    c.local_layers = {true, false, true, false};
    c.linear_layers = {false, false, false, true};
    c.random_blocks = 2;
    c.random_block_size = 16;
    const Fixture f = make_fixture("prune_per_layer", c);
    const std::string& path = f.path;
    const model::Model m(path);
    PruneOptions o;
    o.layers = 1;
    o.imatrix = &f.im;
    o.calib_tokens = random_tokens(200, m.hparams().n_vocab, 12);
    o.calib_ctx = 48;
    const PruneResult r = prune_structured(path, tmp("per_layer.gguf"), o);
    ASSERT_EQ(r.removed_layers.size(), 1u);
    o.mask_only = true;
    prune_structured(path, tmp("per_layer_mask.gguf"), o);
    const model::Model small(tmp("per_layer.gguf"));
    const model::HParams &a = m.hparams(), &b = small.hparams();
    ASSERT_EQ(b.n_layer, 3);
    ASSERT_EQ(b.random_layers.size(), 3u);
    for (int il = 0, j = 0; il < 4; ++il) {
        if (il == r.removed_layers[0]) continue;
        EXPECT_EQ(b.window(j), a.window(il)) << il;
        EXPECT_EQ(b.linear_attention(j), a.linear_attention(il)) << il;
        EXPECT_EQ(b.random_layers[static_cast<size_t>(j)], static_cast<uint32_t>(il));
        ++j;
    }
    const std::vector<int32_t> tokens = random_tokens(100, a.n_vocab, 8);
    const std::vector<float> x = logits_of(tmp("per_layer.gguf"), tokens, 128);
    const std::vector<float> y = logits_of(tmp("per_layer_mask.gguf"), tokens, 128);
    double diff = 0;
    for (size_t i = 0; i < x.size(); ++i) diff = std::max(diff, std::fabs(double(x[i]) - y[i]));
    EXPECT_LT(diff, 1e-4);
}

TEST(Prune, FineTuningKeepsZeros) {
    const Fixture& f = gqa_model();
    PruneOptions o;
    o.score = PruneScore::Magnitude;
    o.sparsity = 0.5;
    const std::string out = tmp("pruned_ft.gguf");
    prune_unstructured(f.path, out, o);
    const io::GGUFFile file(out);
    train::TrainModel m(file);
    backend::CpuBackend be(2);
    std::vector<int32_t> ids =
        random_tokens(2 * 17, m.params().find("token_embd.weight")->ne[1], 4);
    train::FixedBatch data(ids, 2, 16);
    train::TrainOptions opt;
    opt.B = 2;
    opt.T = 16;
    opt.steps = 3;
    opt.keep_zeros = true;
    opt.schedule.lr = 1e-2f;
    train::Trainer t(m, data, opt, be);
    const float* before = m.params().value("blk.0.ffn_up.weight");
    const int64_t n = m.params().find("blk.0.ffn_up.weight")->numel;
    std::vector<float> start(before, before + n);
    while (!t.done()) t.step();
    int64_t zeros = 0, changed = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (start[i] == 0.0f)
            zeros += before[i] == 0.0f;
        else
            changed += before[i] != start[i];
    }
    EXPECT_EQ(zeros, n / 2);
    EXPECT_GT(changed, n / 4);  // the others did train
}

}  // namespace
}  // namespace syslm::compress
