// AWQ scaling folds 1/s into the previous op, so the scaled model computes the same function:
// with scaling forced (alpha 1) into an F32 file its logits equal the original's up to float
// rounding, grouped-query attention included (query heads sharing a KV head share the scales
// folded into attn_v's rows). A wrong fold moves them by orders of magnitude more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../common/model_checks.hpp"
#include "../common/random_model.hpp"
#include "compress/imatrix.hpp"
#include "compress/quantize_model.hpp"
#include "io/gguf.hpp"
#include "kernels/type_traits.hpp"
#include "model/transformer.hpp"

namespace syslm::compress {
namespace {

using testing::logits_of;
using testing::max_diff;
using testing::random_tokens;

TEST(Awq, ScaledModelComputesTheSameFunction) {
    model::InitConfig c = testing::small_model_config("llama", 64, 21);
    c.n_embd = 64;  // rows that fit 32-element blocks
    c.n_head = 4;   // on 2 KV heads: GQA
    c.n_ff = 96;
    const std::string path = testing::write_test_model("awq_llama", c);
    const model::Model m(path);
    const int V = m.hparams().n_vocab;
    // Importances spread over four orders of magnitude (a random model's are nearly flat, and
    // scales near 1 would hide a wrong fold): activations with per-column magnitudes.
    ImportanceMatrix im;
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> log_mag(-2.3f, 2.3f);
    const io::GGUFFile f(path);
    for (const io::GGUFTensor& t : f.tensors()) {
        if (t.ne.size() < 2 || t.name == "token_embd.weight") continue;
        const int64_t n = t.ne[0];
        std::vector<float> mag(static_cast<size_t>(n)), x(static_cast<size_t>(16 * n));
        for (float& v : mag) v = std::exp(log_mag(rng));
        for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * mag[i % static_cast<size_t>(n)];
        im.add(t.name, 0, 1, x.data(), 16, n);
    }

    const std::string dir = std::string(SYSLM_TEST_TMP) + "/";
    const std::vector<int32_t> tokens = random_tokens(40, V, 77);
    const std::vector<float> ref = logits_of(path, tokens);
    double scale = 0;
    for (float v : ref) scale = std::max(scale, std::fabs(double(v)));

    // Forced strong scaling (alpha 1) into an F32 file: the same function up to float rounding.
    QuantizeOptions q;
    q.target = {DType::F32, KMix::None};
    q.threads = 2;
    q.imatrix = &im;
    q.awq = true;
    q.awq_alphas = {1.0};
    const QuantizeResult r = quantize_model(path, dir + "awq_f32.gguf", q);
    int scaled = 0;
    for (const auto& t : r.tensors) scaled += t.note.find("AWQ") != std::string::npos;
    EXPECT_EQ(scaled, 2 * 9 + 2);  // per layer 2 norms + 7 matrices; output_norm + output
    const io::GGUFFile src(path), out(dir + "awq_f32.gguf");
    std::vector<float> a(64), b(64);
    kernels::type_traits(src.tensor("blk.0.attn_norm.weight").type)
        .to_float(src.tensor("blk.0.attn_norm.weight").data, a.data(), 64);
    kernels::type_traits(out.tensor("blk.0.attn_norm.weight").type)
        .to_float(out.tensor("blk.0.attn_norm.weight").data, b.data(), 64);
    EXPECT_GT(max_diff(a, b), 0.1);  // the norm really absorbed scales
    EXPECT_LT(max_diff(logits_of(dir + "awq_f32.gguf", tokens), ref), 1e-4 * scale);

    // The searched grid into Q8_0: never further from the float model than plain Q8_0 by much
    // (the search keeps alpha 0 where scaling does not lower the weighted error).
    q.target = {DType::Q8_0, KMix::None};
    q.awq_alphas = {};
    q.imatrix = nullptr;
    q.awq = false;
    quantize_model(path, dir + "awq_plain_q8.gguf", q);
    q.imatrix = &im;
    q.awq = true;
    quantize_model(path, dir + "awq_q8.gguf", q);
    const double plain = max_diff(logits_of(dir + "awq_plain_q8.gguf", tokens), ref);
    const double awq = max_diff(logits_of(dir + "awq_q8.gguf", tokens), ref);
    EXPECT_LT(awq, 2 * plain) << "plain Q8_0 " << plain;
}

}  // namespace
}  // namespace syslm::compress
