// Cross-layer sharing (block_source): the layouts of --share-blocks, the key's validation, and a
// shared model computing exactly what its unshared copy (convert --unshare) computes, in one
// prefill and token by token. (Agreement with transformers running tied modules is checked in
// tests/reference/test_shared_blocks.py.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.hpp"
#include "model/random_init.hpp"
#include "model/shared_blocks.hpp"
#include "model/transformer.hpp"

namespace syslm::model {
namespace {

const std::string kVocab = SYSLM_VOCAB_DIR "/ggml-vocab-llama-spm.gguf";

std::string tmp(const std::string& name) {
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    return std::string(SYSLM_TEST_TMP) + "/shared_" + name + ".gguf";
}

InitConfig shared_config(const std::string& share) {
    InitConfig c;
    c.n_layer = 5;
    c.n_embd = 48;
    c.n_head = 6;
    c.n_head_kv = 2;
    c.n_ff = 72;
    c.n_ctx = 64;
    c.seed = 21;
    c.block_source = shared_blocks(share, c.n_layer);
    return c;
}

TEST(SharedBlocks, LayoutsParseAndRefuseNonsense) {
    EXPECT_EQ(shared_blocks("2", 5), (std::vector<int>{0, 1, 0, 1, 0}));
    EXPECT_EQ(shared_blocks("2:cycle", 5), (std::vector<int>{0, 1, 0, 1, 0}));
    EXPECT_EQ(shared_blocks("2:sequence", 5), (std::vector<int>{0, 0, 0, 3, 3}));
    EXPECT_EQ(shared_blocks("1:sequence", 3), (std::vector<int>{0, 0, 0}));  // ALBERT
    EXPECT_EQ(shared_blocks("3", 3), (std::vector<int>{0, 1, 2}));
    for (const char* bad : {"0", "6", "x", "2:", "2:ring", "2x", ""})
        EXPECT_THROW(shared_blocks(bad, 5), Error) << bad;
}

TEST(SharedBlocks, TheKeyIsValidatedNamingIt) {
    const io::GGUFFile base([] {
        const std::string p = tmp("base");
        InitConfig c = shared_config("5");
        c.block_source.clear();
        write_random_model(c, kVocab, p);
        return p;
    }());
    auto with = [&](const char* tag, std::vector<uint32_t> src) {
        io::GGUFWriter w;
        for (const auto& [k, v] : base.metadata()) w.set(k, v);
        std::vector<io::GGUFValue> items;
        for (uint32_t b : src) items.push_back(io::GGUFValue::u32(b));
        w.set("llama.block_source", io::GGUFValue::array(io::GGUFType::U32, items));
        for (const auto& t : base.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
        const std::string path = tmp(tag);
        w.write(path);
        return path;
    };
    const Model ok(with("ok", {0, 1, 0, 3, 3}));
    EXPECT_EQ(ok.hparams().block_of(4), 3);
    EXPECT_EQ(ok.hparams().block_of(1), 1);
    for (auto [tag, src] : std::vector<std::pair<const char*, std::vector<uint32_t>>>{
             {"later", {0, 2, 2, 3, 4}}, {"chain", {0, 0, 1, 3, 4}}, {"short", {0, 1, 0}}}) {
        try {
            const Model bad(with(tag, src));
            ADD_FAILURE() << tag << " loaded";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("llama.block_source"), std::string::npos)
                << e.what();
        }
    }
}

// The file holds each shared block once; the unshared copy holds every layer's; both compute
// the same logits bit for bit, in one prefill and through the KV cache.
TEST(SharedBlocks, UnsharedCopyComputesTheSameLogits) {
    const std::string shared = tmp("cycle2"), unshared = tmp("cycle2_unshared");
    write_random_model(shared_config("2"), kVocab, shared);
    unshare_blocks(io::GGUFFile(shared), unshared);
    const io::GGUFFile fs(shared), fu(unshared);
    EXPECT_EQ(fu.tensors().size() - fs.tensors().size(), 3u * 9u);  // layers 2, 3, 4: 9 each
    EXPECT_FALSE(fu.find("llama.block_source"));
    EXPECT_LT(std::filesystem::file_size(shared), std::filesystem::file_size(unshared));
    EXPECT_THROW(unshare_blocks(fu, tmp("twice")), Error);  // nothing shared

    const Model ms(shared), mu(unshared);
    std::mt19937 rng(6);
    std::vector<int32_t> tokens(23);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % ms.hparams().n_vocab);
    Context a(ms, 32, 2), b(mu, 32, 2);
    const auto la = a.forward(tokens, true);
    const std::vector<float> want(la.begin(), la.end());
    const auto lb = b.forward(tokens, true);
    ASSERT_EQ(lb.size(), want.size());
    EXPECT_EQ(std::memcmp(lb.data(), want.data(), want.size() * sizeof(float)), 0);
    Context decode(ms, 32, 1);
    decode.forward(std::span(tokens).first(7), true);
    const size_t V = static_cast<size_t>(ms.hparams().n_vocab);
    for (size_t i = 7; i < tokens.size(); ++i) {
        const auto row = decode.forward(std::span(tokens).subspan(i, 1));
        for (size_t v = 0; v < V; ++v)
            ASSERT_NEAR(row[v], want[i * V + v], 1e-4f * (1 + std::fabs(want[i * V + v])));
    }
}

}  // namespace
}  // namespace syslm::model
