// W8A8: per-channel int8 weights (every Q8_0 block of a row with the row's scale), SmoothQuant
// folded into norms and ffn_up's rows, static activation scales in the metadata and used by the
// forward; the logits stay near the float model's (a wrong fold moves them far), and differ from
// the same weights with dynamic activations (the static path really runs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../common/model_checks.hpp"
#include "../common/random_model.hpp"
#include "compress/imatrix.hpp"
#include "compress/quantize_model.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "io/gguf.hpp"
#include "model/transformer.hpp"

namespace syslm::compress {
namespace {

using testing::logits_of;
using testing::max_diff;
using testing::random_tokens;

TEST(W8A8, PerChannelWeightsStaticActivationsNearFloat) {
    model::InitConfig c = testing::small_model_config("llama", 64, 61);
    c.n_embd = 64;
    c.n_head = 4;
    c.n_ff = 96;
    const std::string path = testing::write_test_model("w8a8_llama", c);
    const model::Model m(path);
    ImatrixOptions io;
    io.n_ctx = 48;
    const ImportanceMatrix im =
        collect_imatrix(m, random_tokens(144, m.hparams().n_vocab, 3), -1, io);
    QuantizeOptions q;
    q.target = *parse_quant_target("w8a8");
    q.imatrix = &im;
    const std::string dir = std::string(SYSLM_TEST_TMP) + "/";
    const QuantizeResult r = quantize_model(path, dir + "w8a8.gguf", q);
    EXPECT_EQ(quant_target_name(q.target), "W8A8");

    const io::GGUFFile f(dir + "w8a8.gguf");
    const std::vector<std::string> names = f.get("syslm.w8a8.tensors").as_strings();
    const std::vector<float> scales = f.get("syslm.w8a8.act_scales").as_f32s();
    ASSERT_EQ(names.size(), scales.size());
    EXPECT_EQ(names.size(), 2u * 7 + 1);  // 7 matrices per layer and the output
    // One scale per row: every block of a row holds the same f16 d.
    const io::GGUFTensor& t = f.tensor("blk.1.ffn_down.weight");
    ASSERT_EQ(t.type, DType::Q8_0);
    const size_t blocks = static_cast<size_t>(t.ne[0] / 32), block_bytes = 34;
    for (int64_t row = 0; row < t.rows(); ++row) {
        uint16_t d0;
        std::memcpy(&d0, t.data + row * blocks * block_bytes, 2);
        for (size_t b = 1; b < blocks; ++b) {
            uint16_t d;
            std::memcpy(&d, t.data + (row * blocks + b) * block_bytes, 2);
            ASSERT_EQ(d, d0) << "row " << row;
        }
    }
    const model::Model w(dir + "w8a8.gguf");
    EXPECT_GT(w.weights().layers[0].wq.act_scale, 0.0f);
    EXPECT_GT(w.weights().layers[1].ffn_down.act_scale, 0.0f);
    EXPECT_EQ(w.weights().token_embd.act_scale, 0.0f);

    // Near the float model; the same weights with dynamic activations differ (static scales run).
    io::GGUFWriter dyn;
    for (const auto& [key, value] : f.metadata())
        if (key.rfind("syslm.w8a8.", 0) != 0) dyn.set(key, value);
    for (const io::GGUFTensor& x : f.tensors()) dyn.add_tensor(x.name, x.type, x.ne, x.data, x.nbytes);
    dyn.write(dir + "w8a8_dynamic.gguf");
    const std::vector<int32_t> tokens = random_tokens(40, m.hparams().n_vocab, 7);
    const std::vector<float> ref = logits_of(path, tokens);
    const std::vector<float> st = logits_of(dir + "w8a8.gguf", tokens);
    const std::vector<float> dy = logits_of(dir + "w8a8_dynamic.gguf", tokens);
    double scale = 0;
    for (float v : ref) scale = std::max(scale, std::fabs(double(v)));
    EXPECT_LT(max_diff(st, ref), 0.05 * scale);
    EXPECT_LT(max_diff(dy, ref), 0.05 * scale);  // smoothing folded correctly
    EXPECT_GT(max_diff(st, dy), 0.0);

    // An imatrix file has no maxima: W8A8 asks for calibration text.
    ImportanceMatrix loaded;
    loaded.insert("blk.0.attn_q.weight", im.entries().at("blk.0.attn_q.weight"));
    ImportanceMatrix::Entry e = im.entries().at("blk.0.attn_k.weight");
    e.max_abs.clear();
    ImportanceMatrix no_max;
    no_max.insert("blk.0.attn_k.weight", e);
    q.imatrix = &no_max;
    EXPECT_THROW(quantize_model(path, dir + "w8a8_bad.gguf", q), Error);
    (void)r;
}

}  // namespace
}  // namespace syslm::compress
