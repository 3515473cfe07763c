// Internal consistency of the forward pass on random-initialised models of every architecture:
// one batched prefill, chunked prefill and token-by-token decode through the KV cache must give
// the same logits; bad inputs give clear errors. (Agreement with HF transformers is checked in
// tests/reference/test_model_logits.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <tuple>

#include "../common/model_checks.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "kernels/isa.hpp"
#include "kernels/repack.hpp"
#include "kernels/type_traits.hpp"
#include "model/random_init.hpp"
#include "model/transformer.hpp"

namespace syslm::model {
namespace {

const std::string kVocab = SYSLM_VOCAB_DIR "/ggml-vocab-llama-spm.gguf";

std::string make_model(const std::string& tag, InitConfig cfg) {
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    const std::string path = std::string(SYSLM_TEST_TMP) + "/model_" + tag + ".gguf";
    write_random_model(cfg, kVocab, path);
    return path;
}

InitConfig small(const std::string& arch) {
    InitConfig c;
    c.arch = arch;
    c.n_layer = 2;
    c.n_embd = 48;
    c.n_head = 6;
    c.n_head_kv = arch == "gpt2" ? 6 : 2;
    c.n_ff = 72;
    c.n_ctx = 64;
    c.seed = 11;
    return c;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % n_vocab);
    return t;
}

using testing::max_rel_diff;

class ForwardConsistency : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardConsistency, PrefillChunkedAndDecodeAgree) {
    const bool llama_like = GetParam().starts_with("mixtral") || GetParam().starts_with("llama_");
    InitConfig cfg = small(llama_like ? "llama" : GetParam());
    if (GetParam() == "llama_shared") {  // layer 2 computes with layer 0's block
        cfg.n_layer = 3;
        cfg.block_source = {0, 1, 0};
    }
    cfg.swish_beta = GetParam() == "llama_swish_beta";
    if (GetParam() == "llama_linear") cfg.linear_layers = {true, false};
    if (GetParam() == "llama_conv") cfg.conv_kernel = 3;
    if (GetParam().starts_with("llama_local_global") || GetParam().starts_with("gemma")) {
        cfg.window = 5;  // local, global
        cfg.local_layers = attention_pattern("1:1", cfg.n_layer);
    }
    if (GetParam() == "llama_local_global_tokens") cfg.global_tokens = 2;
    if (GetParam() == "gemma3") cfg.rope_freq_base = 1e6f;  // the global layer's (local: 1e4)
    if (GetParam() == "mixtral" || GetParam() == "qwen2moe" || GetParam() == "qwen3moe") {
        cfg.n_expert = 4;
        cfg.n_expert_used = 2;
    }
    if (GetParam() == "mixtral_top_p") {  // 1 to 4 of 6 experts, until they reach p = 0.5
        cfg.n_expert = 6;
        cfg.n_expert_used = 4;
        cfg.expert_top_p = 0.5f;
    }
    const Model m(make_model(GetParam(), cfg));
    const int n = 21, V = m.hparams().n_vocab;
    const auto tokens = random_tokens(n, V, 5);

    Context full(m, 32, 2);
    const auto ref = full.forward(tokens, true);
    const std::vector<float> ref_copy(ref.begin(), ref.end());

    Context chunked(m, 32, 2, /*n_batch=*/4);
    const auto got = chunked.forward(tokens, true);
    EXPECT_LT(max_rel_diff(got, ref_copy), 1e-5f);

    Context decode(m, 32, 1);
    decode.forward(std::span(tokens).first(6), true);
    for (int i = 6; i < n; ++i) {
        const auto row = decode.forward(std::span(tokens).subspan(i, 1));
        ASSERT_LT(max_rel_diff(row, std::span(ref_copy).subspan(size_t(i) * V, V)), 1e-5f) << i;
    }
    EXPECT_EQ(decode.n_past(), n);
}

// Windowed layers keep a ring of their last positions (KVCache): the logits are the same bits
// as with every position kept, for a prefill longer than the ring, chunked prefill, decode, a
// speculative rollback, F16 and F32; global layers of the same model keep every position. With
// global tokens the ring layers keep a page of first positions for good.
TEST(KvRing, LogitsEqualTheFullCacheBitForBit) {
    for (const auto& [all_local, global] :
         {std::pair{true, 0}, std::pair{false, 0}, std::pair{true, 3}, std::pair{false, 3}}) {
        InitConfig cfg = small("llama");
        cfg.n_ctx = 600;
        cfg.window = 7;
        cfg.global_tokens = global;
        if (!all_local) cfg.local_layers = attention_pattern("1:1", cfg.n_layer);
        const Model m(make_model(
            std::string(all_local ? "ring_local" : "ring_local_global") + std::to_string(global),
            cfg));
        const int n = 420, V = m.hparams().n_vocab;
        const auto tokens = random_tokens(n, V, 9);
        for (const DType kv : {DType::F32, DType::F16})
            for (const int n_batch : {512, 5}) {
                Context full(m, 600, 2, n_batch, kv, /*rings=*/false);
                Context ring(m, 600, 2, n_batch, kv);
                // w + max(batch, 64) - 1 rows, rounded up to 64: 576 of 600, or 128; a page
                // more for the global tokens (then 640 saves nothing: no ring).
                const int rows = (global > 0 ? 64 : 0) + (n_batch == 512 ? 576 : 128);
                const int cap = rows < 600 ? rows : 600;
                EXPECT_EQ(ring.kv_cache().ring(0), cap < 600);
                EXPECT_EQ(ring.kv_cache().capacity(0), cap);
                EXPECT_EQ(ring.kv_cache().resident(), cap < 600 && global > 0 ? 64 : 0);
                EXPECT_EQ(ring.kv_cache().ring(1), all_local && cap < 600);
                EXPECT_EQ(ring.kv_cache().capacity(1), all_local ? cap : 600);
                EXPECT_EQ(ring.kv_cache().bytes() * 600,
                          full.kv_cache().bytes() / 2 * (cap + ring.kv_cache().capacity(1)));
                // A prefill of 300 (several rings' worth when n_batch is 5), then decode.
                const auto a = full.forward(std::span(tokens).first(300), true);
                const std::vector<float> want(a.begin(), a.end());
                const auto b = ring.forward(std::span(tokens).first(300), true);
                ASSERT_EQ(std::memcmp(b.data(), want.data(), want.size() * sizeof(float)), 0)
                    << "prefill, batch " << n_batch << " " << dtype_name(kv);
                for (int i = 300; i < n; ++i) {
                    if (i == 360) {  // drafted 20 positions, rolled back 20
                        for (Context* c : {&full, &ring}) {
                            c->forward(std::span(tokens).subspan(i, 20));
                            c->truncate(i);
                        }
                    }
                    const auto x = full.forward(std::span(tokens).subspan(i, 1));
                    const std::vector<float> row(x.begin(), x.end());
                    const auto y = ring.forward(std::span(tokens).subspan(i, 1));
                    ASSERT_EQ(std::memcmp(y.data(), row.data(), row.size() * sizeof(float)), 0)
                        << "decode " << i << ", batch " << n_batch << " " << dtype_name(kv);
                }
                // Rolling back past what the ring keeps is an error, not a wrong answer.
                if (cap < 600) {
                    EXPECT_THROW(ring.truncate(ring.n_past() - ring.kv_cache().max_rollback() - 1),
                                 Error);
                }
            }
    }
}

// BigBird (window 6, 2 global tokens, 2 random blocks of 16 on the local layer): prefill,
// chunked prefill and decode agree over 150 positions, the local layer keeps every position (no
// ring: a random block may lie anywhere before the window), and the random blocks change what
// the late positions see (the same weights without them give other logits there, and the same
// ones before the first query block that draws).
TEST(BigBird, PrefillChunkedAndDecodeAgreeAndRandomBlocksMatter) {
    InitConfig cfg = small("llama");
    cfg.n_ctx = 256;
    cfg.window = 6;
    cfg.global_tokens = 2;
    cfg.local_layers = attention_pattern("1:1", cfg.n_layer);
    cfg.random_block_size = 16;
    const Model plain(make_model("bigbird_plain", cfg));
    cfg.random_blocks = 2;
    const Model m(make_model("bigbird", cfg));
    const int n = 150, V = m.hparams().n_vocab;
    const auto tokens = random_tokens(n, V, 13);
    Context full(m, 256, 2, 512);
    EXPECT_FALSE(full.kv_cache().ring(0));
    const auto a = full.forward(tokens, true);
    const std::vector<float> ref(a.begin(), a.end());
    Context chunked(m, 256, 2, 7);
    const auto b = chunked.forward(tokens, true);
    EXPECT_LT(max_rel_diff(b, ref), 1e-5f);
    Context decode(m, 256, 1);
    decode.forward(std::span(tokens).first(40), true);
    for (int i = 40; i < n; ++i) {
        const auto row = decode.forward(std::span(tokens).subspan(i, 1));
        ASSERT_LT(max_rel_diff(row, std::span(ref).subspan(size_t(i) * V, V)), 1e-5f) << i;
    }
    // Query block 2 (positions 32-47) is the first with a candidate: block 0 (before 32 - 6 + 1).
    Context other(plain, 256, 2, 512);
    const auto c = other.forward(tokens, true);
    EXPECT_LT(max_rel_diff(std::span(c).first(32 * V), std::span(ref).first(32 * V)), 1e-6f);
    EXPECT_GT(max_rel_diff(std::span(c).subspan(100 * V, V), std::span(ref).subspan(100 * V, V)),
              1e-3f);
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardConsistency,
                         ::testing::Values("llama", "qwen2", "qwen3", "gpt2", "mixtral",
                                           "mixtral_top_p", "qwen2moe", "qwen3moe",
                                           "llama_local_global", "llama_local_global_tokens",
                                           "llama_shared", "llama_swish_beta", "llama_linear",
                                           "llama_conv", "bloom", "mpt", "phi3", "gemma2",
                                           "gemma3"));

TEST(Forward, SlidingWindowOnlySeesRecentTokens) {
    // With a window of 4, the last token's logits cannot depend on tokens 4+ positions back.
    InitConfig cfg = small("llama");
    const std::string path = make_model("window_base", cfg);
    io::GGUFFile base(path);
    io::GGUFWriter w;
    for (const auto& [k, v] : base.metadata()) w.set(k, v);
    w.set("llama.attention.sliding_window", io::GGUFValue::u32(4));
    for (const auto& t : base.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    const std::string windowed = std::string(SYSLM_TEST_TMP) + "/model_window.gguf";
    w.write(windowed);

    const Model m(windowed);
    auto a = random_tokens(12, m.hparams().n_vocab, 9);
    auto b = a;
    b[0] = (b[0] + 1) % m.hparams().n_vocab;  // differs only far outside the window
    b[3] = (b[3] + 7) % m.hparams().n_vocab;
    Context ca(m, 16, 1), cb(m, 16, 1);
    // Layers stack windows: after L layers a token sees L*(window-1) back; 2 layers -> 6.
    const auto la = ca.forward(a);
    const std::vector<float> la_copy(la.begin(), la.end());
    const auto lb = cb.forward(b);
    EXPECT_EQ(max_rel_diff(lb, la_copy), 0.0f);
    b[8] = (b[8] + 1) % m.hparams().n_vocab;  // inside the window: must change the result
    Context cc(m, 16, 1);
    EXPECT_GT(max_rel_diff(cc.forward(b), la_copy), 1e-4f);
}

TEST(Forward, GlobalLayersOfAnAttentionPatternSeeTheWholePrefix) {
    // Layer 0 local (window 4), layer 1 global: a change far outside the window reaches the
    // last token through the global layer; with both layers local (the test above) it does not.
    InitConfig cfg = small("llama");
    cfg.window = 4;
    cfg.local_layers = attention_pattern("1:1", cfg.n_layer);
    ASSERT_EQ(cfg.local_layers, (std::vector<bool>{true, false}));
    const Model m(make_model("window_pattern", cfg));
    EXPECT_EQ(m.hparams().window(0), 4);
    EXPECT_EQ(m.hparams().window(1), 0);
    auto a = random_tokens(12, m.hparams().n_vocab, 9);
    auto b = a;
    b[0] = (b[0] + 1) % m.hparams().n_vocab;
    Context ca(m, 16, 1), cb(m, 16, 1);
    const auto la = ca.forward(a);
    const std::vector<float> la_copy(la.begin(), la.end());
    EXPECT_GT(max_rel_diff(cb.forward(b), la_copy), 1e-4f);
}

TEST(Forward, AttentionPatternsParseAndRefuseNonsense) {
    EXPECT_EQ(attention_pattern("5:1", 7),
              (std::vector<bool>{true, true, true, true, true, false, true}));
    EXPECT_EQ(attention_pattern("0:1", 2), (std::vector<bool>{false, false}));
    for (const char* bad : {"5", "5:", ":1", "a:b", "0:0", "-1:2", "5:1x"})
        EXPECT_THROW(attention_pattern(bad, 4), Error) << bad;
}

TEST(Forward, SlidingWindowPatternKeyIsReadAsBoolsOrAPeriod) {
    InitConfig cfg = small("llama");
    cfg.n_layer = 4;
    io::GGUFFile base(make_model("pattern_keys", cfg));
    auto with = [&](const char* tag, const io::GGUFValue& pattern) {
        io::GGUFWriter w;
        for (const auto& [k, v] : base.metadata()) w.set(k, v);
        w.set("llama.attention.sliding_window", io::GGUFValue::u32(3));
        w.set("llama.attention.sliding_window_pattern", pattern);
        for (const auto& t : base.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
        const std::string path = std::string(SYSLM_TEST_TMP) + "/model_pattern_" + tag + ".gguf";
        w.write(path);
        return path;
    };
    // llama.cpp's period 2: layer il is local unless il % 2 == 1.
    const Model period(with("period", io::GGUFValue::u32(2)));
    for (int il = 0; il < 4; ++il) EXPECT_EQ(period.hparams().window(il), il % 2 == 1 ? 0 : 3);
    const std::vector<io::GGUFValue> bools = {
        io::GGUFValue::boolean(false), io::GGUFValue::boolean(true), io::GGUFValue::boolean(true),
        io::GGUFValue::boolean(false)};
    const Model array(with("bools", io::GGUFValue::array(io::GGUFType::BOOL, bools)));
    for (int il = 0; il < 4; ++il)
        EXPECT_EQ(array.hparams().window(il), il == 1 || il == 2 ? 3 : 0);
    const std::vector<io::GGUFValue> three(bools.begin(), bools.begin() + 3);
    EXPECT_THROW(Model(with("short", io::GGUFValue::array(io::GGUFType::BOOL, three))), Error);
}

// A model whose local layers run with another window (Model::set_window, --window N) computes
// what a file with that window computes, bit for bit; a model without local layers refuses it.
TEST(Forward, SetWindowEqualsAFileWithThatWindow) {
    InitConfig cfg = small("llama");
    cfg.window = 9;
    cfg.local_layers = attention_pattern("1:1", cfg.n_layer);
    const std::string nine = make_model("set_window_9", cfg);
    cfg.window = 4;
    const std::string four = make_model("set_window_4", cfg);  // the same weights (same seed)
    Model changed(nine);
    changed.set_window(4);
    const Model file_four(four), file_nine(nine);
    const auto tokens = random_tokens(30, file_four.hparams().n_vocab, 3);
    Context a(changed, 32, 2), b(file_four, 32, 2), c(file_nine, 32, 2);
    const auto la = a.forward(tokens, true);
    const std::vector<float> want(la.begin(), la.end());
    const auto lb = b.forward(tokens, true);
    EXPECT_EQ(std::memcmp(lb.data(), want.data(), want.size() * sizeof(float)), 0);
    EXPECT_GT(max_rel_diff(c.forward(tokens, true), want), 1e-4f);
    Model global(make_model("set_window_global", small("llama")));
    EXPECT_THROW(global.set_window(4), Error);
    EXPECT_THROW(changed.set_window(0), Error);
}

// attention.window_policy.lengths / .windows: read, applied by input length, and refused when
// malformed (naming the key) or on a model without local layers.
TEST(Forward, WindowPolicyMapsInputLengthToAWindow) {
    InitConfig cfg = small("llama");
    cfg.window = 8;
    io::GGUFFile base(make_model("policy_base", cfg));
    auto with = [&](const char* tag, std::vector<uint32_t> lengths, std::vector<uint32_t> windows,
                    bool local = true) {
        io::GGUFWriter w;
        for (const auto& [k, v] : base.metadata())
            if (local || k != "llama.attention.sliding_window") w.set(k, v);
        w.set("llama.attention.window_policy.lengths", io::GGUFValue::u32s(lengths));
        w.set("llama.attention.window_policy.windows", io::GGUFValue::u32s(windows));
        for (const auto& t : base.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
        const std::string path = std::string(SYSLM_TEST_TMP) + "/model_policy_" + tag + ".gguf";
        w.write(path);
        return path;
    };
    const Model m(with("ok", {16, 64}, {3, 8}));
    EXPECT_EQ(m.hparams().window_for_length(1), 3);
    EXPECT_EQ(m.hparams().window_for_length(16), 3);
    EXPECT_EQ(m.hparams().window_for_length(17), 8);
    EXPECT_EQ(m.hparams().window_for_length(5000), 8);
    EXPECT_THROW(Model(make_model("policy_none", cfg)).hparams().window_for_length(10), Error);
    for (const auto& [tag, l, w] :
         {std::tuple{"decreasing", std::vector<uint32_t>{64, 16}, std::vector<uint32_t>{3, 8}},
          std::tuple{"uneven", std::vector<uint32_t>{16, 64}, std::vector<uint32_t>{3}},
          std::tuple{"zero", std::vector<uint32_t>{16}, std::vector<uint32_t>{0}}}) {
        try {
            Model bad(with(tag, l, w));
            ADD_FAILURE() << tag << " loaded";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("window_policy"), std::string::npos) << e.what();
        }
    }
    EXPECT_THROW(Model(with("global", {16}, {3}, /*local=*/false)), Error);
}

// The residual stream entering each layer, as observe_residual reports it.
struct Residuals : ActivationObserver {
    std::vector<std::vector<float>> after;  // after[il]: the stream after block il
    void observe(const std::string&, int, const float*, int64_t, int64_t) override {}
    void observe_residual(int il, const float* x, int64_t rows, int64_t n_embd) override {
        after.resize(std::max<size_t>(after.size(), static_cast<size_t>(il) + 1));
        after[static_cast<size_t>(il)].assign(x, x + rows * n_embd);
    }
};

// The sensitivity measurement's shortcut: a model changed only from layer l on, run from the
// unchanged model's residual entering layer l, gives the whole forward's logits bit for bit.
TEST(Forward, RunFromALayerGivesTheWholeForwardsLogits) {
    InitConfig cfg = small("llama");
    cfg.n_layer = 3;
    auto file = std::make_shared<const io::GGUFFile>(make_model("run_from", cfg));
    const Model base(file);
    const auto tokens = random_tokens(21, base.hparams().n_vocab, 5);
    Residuals seen;
    Context ref(base, 32, 2);
    ref.set_observer(&seen);
    const std::vector<float> base_logits = [&] {
        auto l = ref.forward(tokens, true);
        return std::vector<float>(l.begin(), l.end());
    }();
    ASSERT_EQ(seen.after.size(), 3u);
    for (int layer = 1; layer <= cfg.n_layer; ++layer) {
        // The layer's FFN input matrix (the output matrix past the last layer), scaled by 1.1.
        const std::string name =
            layer < cfg.n_layer ? cat("blk.", layer, ".ffn_up.weight") : "output.weight";
        const io::GGUFTensor& t = file->tensor(name);
        ASSERT_EQ(t.type, DType::F32);
        auto bytes = std::make_shared<std::vector<uint8_t>>(t.data, t.data + t.nbytes);
        float* w = reinterpret_cast<float*>(bytes->data());
        for (int64_t i = 0; i < t.numel(); ++i) w[i] *= 1.1f;
        const Model changed(file, {{name, DType::F32, bytes}});
        Context whole(changed, 32, 2), part(changed, 32, 2);
        const auto a = whole.forward(tokens, true);
        const auto b = part.forward_from(layer, seen.after[static_cast<size_t>(layer - 1)]);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << name;
        EXPECT_GT(max_rel_diff(a, base_logits), 1e-3f) << name << " changed nothing";
        EXPECT_EQ(part.n_past(), 21);
    }
    Context c(base, 32, 2);
    EXPECT_THROW(c.forward_from(4, seen.after[0]), Error);  // past the last layer
    EXPECT_THROW(c.forward_from(1, std::span<const float>(seen.after[0]).first(47)), Error);
}

// A model split in two contexts (an edge's layers [0, L), a cloud's [L, n)): the prompt, then
// token by token, each side keeping its own cache, gives one context's logits bit for bit.
TEST(Forward, ASplitModelGivesOneContextsLogits) {
    InitConfig cfg = small("llama");
    cfg.n_layer = 3;
    const Model m(make_model("split", cfg));
    const auto tokens = random_tokens(17, m.hparams().n_vocab, 9);
    for (int at : {1, 2}) {
        Context whole(m, 32, 2), edge(m, 32, 2), cloud(m, 32, 2);
        const auto prompt = std::span<const int32_t>(tokens).first(12);
        const auto a = whole.forward(prompt, true);
        const std::vector<float> want(a.begin(), a.end());
        const auto r = edge.residual_until(at, prompt);
        ASSERT_EQ(r.size(), prompt.size() * static_cast<size_t>(m.hparams().n_embd));
        const auto b = cloud.forward_from(at, r);
        ASSERT_EQ(b.size(), want.size());
        EXPECT_EQ(std::memcmp(b.data(), want.data(), want.size() * sizeof(float)), 0) << at;
        for (size_t i = 12; i < tokens.size(); ++i) {
            const auto one = std::span<const int32_t>(tokens).subspan(i, 1);
            const auto w = whole.forward(one);
            const std::vector<float> wv(w.begin(), w.end());
            const auto c = cloud.forward_from(at, edge.residual_until(at, one));
            ASSERT_EQ(c.size(), wv.size());
            EXPECT_EQ(std::memcmp(c.data(), wv.data(), wv.size() * sizeof(float)), 0) << at << i;
        }
        EXPECT_EQ(edge.n_past(), 17);
        EXPECT_EQ(cloud.n_past(), 17);
    }
    Context c(m, 32, 2);
    EXPECT_THROW(c.residual_until(4, std::span<const int32_t>(tokens).first(2)), Error);
}

TEST(Forward, BadInputsGiveClearErrors) {
    const Model m(make_model("errors", small("llama")));
    Context ctx(m, 8, 1);
    const int32_t bad[] = {1, m.hparams().n_vocab};
    try {
        ctx.forward(bad);
        FAIL() << "no error for an out-of-vocabulary token";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos);
    }
    const auto nine = random_tokens(9, m.hparams().n_vocab, 1);
    try {
        ctx.forward(nine);
        FAIL() << "no error for overflowing the context";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("context is full"), std::string::npos);
    }
}

// Quantized KV caches (--cache-type-k / -v): the cache holds the types' blocks (its bytes are
// theirs), and the logits move away from the F16 cache's by an amount that grows as the bits
// fall (the stored values' rounding error is ~16x larger for Q4_0 than for Q8_0). A model whose
// heads are not whole blocks is refused, naming the sizes.
TEST(KvTypes, QuantizedCachesHoldTheirBlocksAndTheirErrorGrowsAsBitsFall) {
    InitConfig c = small("llama");
    c.n_embd = 128;
    c.n_head = 4;
    c.n_head_kv = 2;  // head_dim 32
    c.n_ctx = 256;
    const Model m(make_model("kv_types", c));
    const auto prompt = random_tokens(200, m.hparams().n_vocab, 5);
    const auto logits_of = [&](KvTypes kv, size_t* bytes) {
        Context ctx(m, 256, 2, 64, kv);
        const auto out = ctx.forward(prompt, true);
        *bytes = ctx.kv_cache().bytes();
        return std::vector<float>(out.begin(), out.end());
    };
    size_t b16 = 0, b8 = 0, b4 = 0, bmix = 0;
    const auto f16 = logits_of({}, &b16), q8 = logits_of(DType::Q8_0, &b8),
               q4 = logits_of(DType::Q4_0, &b4);
    logits_of({DType::Q8_0, DType::Q4_0}, &bmix);
    EXPECT_EQ(b8 * 64, b16 * 34);  // 32 elements: 64 bytes in F16, 34 in Q8_0, 18 in Q4_0
    EXPECT_EQ(b4 * 64, b16 * 18);
    EXPECT_EQ(bmix * 64, b16 * (34 + 18) / 2);
    double d8 = 0, d4 = 0;
    for (size_t i = 0; i < f16.size(); ++i) {
        ASSERT_TRUE(std::isfinite(q8[i]) && std::isfinite(q4[i])) << i;
        d8 += std::fabs(q8[i] - f16[i]);
        d4 += std::fabs(q4[i] - f16[i]);
    }
    EXPECT_GT(d8, 0) << "a Q8_0 cache gave the F16 cache's logits: is it quantized at all?";
    EXPECT_GT(d4, 2 * d8);

    InitConfig odd = small("llama");  // heads of 8
    const Model mo(make_model("kv_types_odd", odd));
    try {
        Context ctx(mo, 16, 1, 16, DType::Q8_0);
        FAIL() << "a Q8_0 cache of 8-element heads was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not a multiple"), std::string::npos) << e.what();
    }
}

// The Hadamard-rotated cache (KvTypes::hadamard) rotates q, k and v per head and the attention
// output back: with an F32 cache that changes nothing but rounding (the rotation is orthogonal,
// its own inverse), across prefill and decode; with Q4_0 it changes what is quantized, so the
// logits differ from plain Q4_0's. Heads that are not a power of two are refused.
TEST(KvTypes, HadamardRotationKeepsAnF32CachesLogits) {
    InitConfig c = small("llama");
    c.n_embd = 128;
    c.n_head = 4;
    c.n_head_kv = 2;  // head_dim 32
    c.n_ctx = 256;
    const Model m(make_model("kv_hadamard", c));
    const auto prompt = random_tokens(120, m.hparams().n_vocab, 9);
    const auto logits_of = [&](KvTypes kv) {
        Context ctx(m, 256, 2, 64, kv);
        std::vector<float> all;
        const auto first = ctx.forward({prompt.data(), 100}, true);  // prefill, then decode
        all.assign(first.begin(), first.end());
        for (size_t i = 100; i < prompt.size(); ++i) {
            const auto next = ctx.forward({prompt.data() + i, 1}, true);
            all.insert(all.end(), next.begin(), next.end());
        }
        return all;
    };
    KvTypes f32h(DType::F32), q4h(DType::Q4_0);
    f32h.hadamard = q4h.hadamard = true;
    const auto plain = logits_of(DType::F32), rotated = logits_of(f32h);
    const auto q4 = logits_of(DType::Q4_0), q4r = logits_of(q4h);
    float scale = 0, diff = 0, diff_q4 = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
        scale = std::max(scale, std::fabs(plain[i]));
        diff = std::max(diff, std::fabs(plain[i] - rotated[i]));
        diff_q4 = std::max(diff_q4, std::fabs(q4[i] - q4r[i]));
    }
    // float rounding of a few extra sums per element, through 2 layers: far below what the
    // quantized caches move (Q8_0's error is ~2^-8 of the values)
    EXPECT_LT(diff, 1e-4f * scale);
    EXPECT_GT(diff_q4, 1e-3f * scale) << "the rotation did not change what Q4_0 stores";
    EXPECT_EQ(q4h.name(), "q4_0+h");
    EXPECT_EQ(kv_types_from_name("q8_0/q4_0+h").hadamard, true);

    InitConfig odd = small("llama");
    odd.n_embd = 96;
    odd.n_head = 4;  // heads of 24
    odd.n_head_kv = 4;
    const Model mo(make_model("kv_hadamard_odd", odd));
    KvTypes f16h;
    f16h.hadamard = true;
    try {
        Context ctx(mo, 16, 1, 16, f16h);
        FAIL() << "a Hadamard cache of 24-element heads was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("power-of-two"), std::string::npos) << e.what();
    }
}

TEST(Load, MissingOrMisshapenTensorNamesTheTensor) {
    const std::string path = make_model("full", small("qwen2"));
    io::GGUFFile base(path);
    auto rewrite = [&](const std::string& out, auto&& edit) {
        io::GGUFWriter w;
        for (const auto& [k, v] : base.metadata()) w.set(k, v);
        for (const auto& t : base.tensors()) edit(w, t);
        w.write(out);
        return out;
    };
    const std::string dropped =
        rewrite(std::string(SYSLM_TEST_TMP) + "/model_dropped.gguf",
                [](io::GGUFWriter& w, const io::GGUFTensor& t) {
                    if (t.name != "blk.1.attn_k.bias")
                        w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
                });
    try {
        Model m(dropped);
        FAIL() << "loaded a model with a missing tensor";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("blk.1.attn_k.bias"), std::string::npos) << e.what();
    }
    const std::string reshaped = rewrite(std::string(SYSLM_TEST_TMP) + "/model_reshaped.gguf",
                                         [](io::GGUFWriter& w, const io::GGUFTensor& t) {
                                             auto ne = t.ne;
                                             if (t.name == "blk.0.ffn_up.weight")
                                                 std::swap(ne[0], ne[1]);
                                             w.add_tensor(t.name, t.type, ne, t.data, t.nbytes);
                                         });
    try {
        Model m(reshaped);
        FAIL() << "loaded a model with a wrong shape";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up.weight"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("expected"), std::string::npos) << e.what();
    }
}

// Q4_0 and K-quant matrices are repacked at load where that is faster (kernels/repack.hpp:
// Q4_0_G8, Q4_K_LANE, Q5_K_LANE, Q6_K_LANE); decode over the repacked layout gives the logits of
// the file layout (SYSLM_REPACK=0) up to float summation order.
TEST(Load, RepackedMatricesDecodeLikeTheFileLayout) {
    InitConfig cfg = small("llama");
    cfg.n_embd = 256;
    cfg.n_head = 4;
    cfg.n_ff = 512;
    const io::GGUFFile base(make_model("repack_base", cfg));
    for (const DType type : {DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        const std::string path = std::string(SYSLM_TEST_TMP) + "/model_repack_" +
                                 std::string(dtype_name(type)) + ".gguf";
        {
            io::GGUFWriter w;
            for (const auto& [k, v] : base.metadata()) w.set(k, v);
            std::vector<std::vector<uint8_t>> keep;
            for (const auto& t : base.tensors()) {
                if (t.ne.size() != 2 || t.name.rfind("blk.", 0) != 0) {
                    w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
                    continue;
                }
                auto& q = keep.emplace_back(row_bytes(type, t.ne[0]) * t.ne[1]);
                kernels::type_traits(type).from_float(reinterpret_cast<const float*>(t.data),
                                                      q.data(), t.ne[0] * t.ne[1]);
                w.add_tensor(t.name, type, t.ne, q.data(), q.size());
            }
            w.write(path);
        }
        const auto tokens = random_tokens(12, 32000, 3);
        auto decode = [&](const Model& m) {
            // An f32 cache: an f16 one would round two nearly equal keys to f16 values an ulp
            // (2^-11) apart now and then, and carry that up to the logits.
            Context ctx(m, 16, 2, 512, KvTypes(DType::F32));
            std::vector<float> all;
            for (int32_t t : tokens) {
                const auto row = ctx.forward(std::span(&t, 1));
                all.insert(all.end(), row.begin(), row.end());
            }
            return all;
        };
        setenv("SYSLM_REPACK", "0", 1);
        const Model file_layout(path);
        unsetenv("SYSLM_REPACK");
        const Model repacked(path);
        EXPECT_EQ(file_layout.weights().layers[0].wq.type, type);
        const DType expected = kernels::load_layout(type, cfg.n_ff);
        EXPECT_EQ(repacked.weights().layers[0].ffn_down.type, expected) << dtype_name(type);
        if (type == DType::Q4_0 && kernels::active_isa() != kernels::Isa::Scalar) {
            EXPECT_EQ(expected, DType::Q4_0_G8);
        }
        EXPECT_LT(max_rel_diff(decode(repacked), decode(file_layout)), 1e-5f) << dtype_name(type);
    }
}

// SYSLM_WEIGHTS places the matrices: views of the mapped file (mmap), a huge-page copy (copy),
// or the copy where huge pages and memory allow (auto, the default); the logits are the same
// bytes' either way, and an unknown value is refused by name.
TEST(Load, WeightPlacementFollowsSyslmWeights) {
    const std::string path = make_model("placement", small("llama"));
    const auto tokens = random_tokens(6, 32000, 5);
    auto load = [&](const char* mode) {
        setenv("SYSLM_WEIGHTS", mode, 1);
        auto m = std::make_unique<Model>(path);
        unsetenv("SYSLM_WEIGHTS");
        return m;
    };
    auto logits = [&](const Model& m) {
        Context ctx(m, 8, 2);
        const auto row = ctx.forward(tokens);
        return std::vector<float>(row.begin(), row.end());
    };
    auto in_copy = [](const Model& m) {
        const Weights& w = m.weights();
        const auto* p = static_cast<const uint8_t*>(w.layers[0].ffn_up.data);
        const auto* b = static_cast<const uint8_t*>(w.copy.get());
        return b && p >= b && p < b + w.copy_bytes;
    };
    const auto mapped = load("mmap"), copied = load("copy"), chosen = load("auto");
    EXPECT_FALSE(in_copy(*mapped));
    EXPECT_TRUE(in_copy(*copied));
    const bool expect_copy = huge_pages_available() &&
                             std::filesystem::file_size(path) < meminfo_bytes("MemAvailable") / 2;
    EXPECT_EQ(in_copy(*chosen), expect_copy);
    const auto a = logits(*mapped), b = logits(*copied);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    try {
        load("hugepages");
        FAIL() << "accepted SYSLM_WEIGHTS=hugepages";
    } catch (const Error& e) {
        unsetenv("SYSLM_WEIGHTS");
        EXPECT_NE(std::string(e.what()).find("SYSLM_WEIGHTS='hugepages'"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace syslm::model
