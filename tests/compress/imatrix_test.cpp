// Importance matrices: what the forward reports is what each matrix multiplies (checked against
// an independent computation of layer 0's normed input), the GGUF and legacy files round-trip,
// bad files are refused with the file named, and quantize uses the weighted quantizers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../common/model_checks.hpp"
#include "../common/random_model.hpp"
#include "compress/imatrix.hpp"
#include "compress/quantize_model.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::compress {
namespace {

using testing::logits_of;
using testing::max_diff;
using testing::random_tokens;

std::string tmp(const std::string& name) {
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    return std::string(SYSLM_TEST_TMP) + "/" + name;
}

TEST(Imatrix, Layer0InputsAreTheNormedEmbeddings) {
    const std::string path =
        testing::write_test_model("imatrix_llama", testing::small_model_config("llama", 64, 3));
    const model::Model m(path);
    const auto& hp = m.hparams();
    const int n_ctx = 37;  // awkward
    const std::vector<int32_t> tokens = random_tokens(3 * n_ctx + 5, hp.n_vocab, 9);
    ImatrixOptions o;
    o.n_ctx = n_ctx;
    o.threads = 2;
    const ImportanceMatrix im = collect_imatrix(m, tokens, /*bos=*/-1, o);
    EXPECT_EQ(im.chunk_count, 3);
    EXPECT_EQ(im.chunk_size, n_ctx);

    // Independent: rms_norm(embedding) * attn_norm, squared and summed over the 3 chunks.
    const int64_t E = hp.n_embd;
    std::vector<double> want(static_cast<size_t>(E), 0.0);
    const auto& w = m.weights();
    const auto& tt = kernels::type_traits(w.token_embd.type);
    std::vector<float> row(static_cast<size_t>(E));
    for (int i = 0; i < 3 * n_ctx; ++i) {
        tt.to_float(static_cast<const uint8_t*>(w.token_embd.data) +
                        row_bytes(w.token_embd.type, E) * static_cast<size_t>(tokens[i]),
                    row.data(), E);
        double ss = 0;
        for (float v : row) ss += static_cast<double>(v) * v;
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(E) + hp.norm_eps);
        for (int64_t j = 0; j < E; ++j) {
            const double h = row[static_cast<size_t>(j)] * inv * w.layers[0].attn_norm[j];
            want[static_cast<size_t>(j)] += h * h;
        }
    }
    for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"}) {
        const auto& e = im.entries().at(name);
        ASSERT_EQ(e.n_in, E);
        ASSERT_EQ(e.n_mat(), 1);
        EXPECT_EQ(e.count[0], 3 * n_ctx) << name;
        for (int64_t j = 0; j < E; ++j)
            EXPECT_NEAR(e.sum_sq[static_cast<size_t>(j)], want[static_cast<size_t>(j)],
                        1e-4 * want[static_cast<size_t>(j)] + 1e-6)
                << name << " column " << j;
    }
    // Every matrix the layers and the output multiply has an entry of the right width.
    for (int il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        EXPECT_EQ(im.entries().at(p + "attn_output.weight").n_in, hp.q_dim());
        EXPECT_EQ(im.entries().at(p + "ffn_gate.weight").n_in, E);
        EXPECT_EQ(im.entries().at(p + "ffn_down.weight").n_in, hp.n_ff);
    }
    EXPECT_EQ(im.entries().at("output.weight").count[0], 3 * n_ctx);  // every row, not the last
    const std::vector<float> imp = im.importance("blk.0.attn_q.weight", 0, E);
    ASSERT_EQ(imp.size(), static_cast<size_t>(E));
    EXPECT_NEAR(imp[5], want[5] / (3 * n_ctx), 1e-4 * want[5]);
    EXPECT_TRUE(im.importance("blk.0.attn_q.weight", 0, E + 1).empty());
    EXPECT_TRUE(im.importance("no.such.weight", 0, E).empty());
}

TEST(Imatrix, ExpertsGetOneMatrixEach) {
    const std::string path = testing::write_test_model(
        "imatrix_mixtral", testing::small_model_config("mixtral", 64, 4));
    const model::Model m(path);
    ImatrixOptions o;
    o.n_ctx = 32;
    const ImportanceMatrix im =
        collect_imatrix(m, random_tokens(64, m.hparams().n_vocab, 2), -1, o);
    const auto& e = im.entries().at("blk.1.ffn_down_exps.weight");
    EXPECT_EQ(e.n_mat(), 4);
    EXPECT_EQ(e.n_in, m.hparams().n_ff_exp);
    double routed = 0;
    for (double c : e.count) routed += c;
    EXPECT_EQ(routed, 64 * 2);  // each token goes to its top-2 experts
    EXPECT_EQ(im.entries().at("blk.1.ffn_gate_inp.weight").count[0], 64);
}

TEST(Imatrix, GgufFileRoundTrips) {
    ImportanceMatrix a;
    const std::vector<float> x = {1.5f, -2.0f, 0.25f, 3.0f, 0.0f, -1.0f};
    a.add("blk.0.attn_q.weight", 0, 1, x.data(), 2, 3);
    a.add("blk.0.ffn_down_exps.weight", 1, 3, x.data(), 3, 2);
    a.datasets = {"calib.txt"};
    a.chunk_count = 7;
    a.chunk_size = 128;
    const std::string path = tmp("roundtrip.imatrix.gguf");
    a.save(path);
    EXPECT_TRUE(ImportanceMatrix::looks_like_imatrix(path));
    const ImportanceMatrix b = ImportanceMatrix::load(path);
    EXPECT_EQ(b.datasets, a.datasets);
    EXPECT_EQ(b.chunk_count, 7);
    EXPECT_EQ(b.chunk_size, 128);
    ASSERT_EQ(b.entries().size(), 2u);
    for (const auto& [name, e] : a.entries()) {
        const auto& f = b.entries().at(name);
        EXPECT_EQ(f.n_in, e.n_in);
        EXPECT_EQ(f.count, e.count);
        EXPECT_EQ(f.sum_sq, e.sum_sq);  // small exact sums survive float storage
    }
    EXPECT_EQ(b.importance("blk.0.attn_q.weight", 0, 3),
              (std::vector<float>{(1.5f * 1.5f + 3.0f * 3.0f) / 2, 4.0f / 2, (0.0625f + 1.0f) / 2}));
    // The layout llama.cpp reads: [n_in, n_mat] sums and [1, n_mat] counts.
    const io::GGUFFile f(path);
    EXPECT_EQ(f.tensor("blk.0.ffn_down_exps.weight.in_sum2").ne, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(f.tensor("blk.0.ffn_down_exps.weight.counts").ne, (std::vector<int64_t>{1, 3}));
    EXPECT_EQ(f.get_string("general.type"), "imatrix");
}

void put_i32(std::string& s, int32_t v) {
    s.append(reinterpret_cast<const char*>(&v), 4);
}

TEST(Imatrix, ReadsLlamaCppLegacyDat) {
    std::string bytes;
    put_i32(bytes, 1);
    const std::string name = "blk.0.ffn_up.weight";
    put_i32(bytes, static_cast<int32_t>(name.size()));
    bytes += name;
    put_i32(bytes, 4);  // ncall
    put_i32(bytes, 2);  // nval
    for (float v : {8.0f, 2.0f}) bytes.append(reinterpret_cast<const char*>(&v), 4);
    put_i32(bytes, 10);  // last chunk
    put_i32(bytes, 9);
    bytes += "wiki.text";
    const std::string path = tmp("legacy.dat");
    std::ofstream(path, std::ios::binary) << bytes;
    EXPECT_TRUE(ImportanceMatrix::looks_like_imatrix(path));
    const ImportanceMatrix m = ImportanceMatrix::load(path);
    EXPECT_EQ(m.importance(name, 0, 2), (std::vector<float>{2.0f, 0.5f}));  // values / ncall
    EXPECT_EQ(m.datasets, std::vector<std::string>{"wiki.text"});
    EXPECT_EQ(m.chunk_count, 10);

    // Truncated: an error naming the file, not a crash.
    const std::string cut = tmp("legacy_cut.dat");
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, 30);
    try {
        ImportanceMatrix::load(cut);
        FAIL() << "truncated imatrix accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("legacy_cut.dat"), std::string::npos) << e.what();
    }
    // Text is not mistaken for an imatrix.
    const std::string text = tmp("calib.txt");
    std::ofstream(text) << "In the beginning God created the heaven and the earth.\n";
    EXPECT_FALSE(ImportanceMatrix::looks_like_imatrix(text));
}

TEST(Imatrix, QuantizeUsesTheWeightedQuantizer) {
    model::InitConfig c = testing::small_model_config("llama", 64, 5);
    c.n_embd = 64;  // rows that fit 32-element blocks
    c.n_head = 4;
    c.n_ff = 96;
    const std::string path = testing::write_test_model("imatrix_quant", c);
    const model::Model m(path);
    ImatrixOptions o;
    o.n_ctx = 40;
    const ImportanceMatrix im = collect_imatrix(m, random_tokens(80, m.hparams().n_vocab, 4), -1, o);
    QuantizeOptions q;
    q.target = {DType::Q4_0, KMix::None};
    q.threads = 2;
    const std::string plain = tmp("imq_plain.gguf"), weighted = tmp("imq_weighted.gguf");
    quantize_model(path, plain, q);
    q.imatrix = &im;
    const QuantizeResult r = quantize_model(path, weighted, q);
    const io::GGUFFile fp(plain), fw(weighted), src(path);
    const std::string name = "blk.1.attn_q.weight";
    const io::GGUFTensor& t = fw.tensor(name);
    ASSERT_EQ(t.type, DType::Q4_0);
    EXPECT_NE(std::memcmp(t.data, fp.tensor(name).data, t.nbytes), 0);
    // Row by row: exactly the weighted quantizer with the matrix's importance.
    const io::GGUFTensor& s = src.tensor(name);
    const int64_t n = s.ne[0];
    const std::vector<float> imp = im.importance(name, 0, n);
    std::vector<float> row(static_cast<size_t>(n));
    std::vector<uint8_t> qrow(row_bytes(DType::Q4_0, n));
    for (int64_t r = 0; r < s.rows(); ++r) {
        kernels::type_traits(s.type).to_float(s.data + r * row_bytes(s.type, n), row.data(), n);
        kernels::imatrix_quantizer(DType::Q4_0)(row.data(), qrow.data(), n, imp.data());
        EXPECT_EQ(std::memcmp(qrow.data(), t.data + r * qrow.size(), qrow.size()), 0) << r;
    }
    bool noted = false;
    for (const auto& tr : r.tensors) noted |= tr.name == name && tr.note == "imatrix";
    EXPECT_TRUE(noted);

    // An imatrix of another model (wrong widths) is refused, naming the tensor.
    ImportanceMatrix wrong;
    const std::vector<float> x(7, 1.0f);
    wrong.add(name, 0, 1, x.data(), 1, 7);
    q.imatrix = &wrong;
    try {
        quantize_model(path, tmp("imq_wrong.gguf"), q);
        FAIL() << "mismatched imatrix accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace syslm::compress
