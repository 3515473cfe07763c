// The serving engine end to end on a random-initialised model: 16 concurrent greedy requests
// (mixed lengths, shared prefixes) on a KV pool small enough to force preemptions give each the
// tokens it gets alone; max_tokens, stop strings, cancellation, the bounded queue and bad
// requests behave; every page comes back.
#include "infer/engine.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <random>
#include <tuple>

#include "../common/random_lora.hpp"
#include "../common/random_model.hpp"
#include "core/error.hpp"
#include "grammar/gbnf.hpp"
#include "grammar/json.hpp"
#include "grammar/matcher.hpp"
#include "io/gguf.hpp"

namespace syslm::infer {
namespace {

std::shared_ptr<const model::Model> make_model(const std::string& arch = "llama") {
    return std::make_shared<const model::Model>(
        testing::write_test_model("engine_" + arch, testing::small_model_config(arch, 128, 33)));
}

// Collects one request's events.
struct Collector {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;  // of each token (meaningful with GenerationParams::logprobs >= 0)
    std::string text, finish;     // finish_reason_name
    bool done = false;
    int stop_after = -1;  // cancel after this many tokens
    Engine::Callback callback() {
        return [this](const Event& e) {
            std::lock_guard lk(mu);
            if (e.token >= 0) {
                tokens.push_back(e.token);
                logprobs.push_back(e.logprob);
            }
            text += e.text;
            if (e.done) {
                done = true;
                finish = finish_reason_name(e.finish_reason);
                cv.notify_all();
            }
            return stop_after < 0 || static_cast<int>(tokens.size()) < stop_after;
        };
    }
    void wait() {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return done; });
    }
};

std::vector<int32_t> greedy_alone(const model::Model& m, const tokenizer::Tokenizer& tok,
                                  const std::vector<int32_t>& prompt, int n,
                                  model::KvTypes kv = {}, std::vector<model::LoraUse> loras = {}) {
    model::Context ctx(m, 128, 2, 512, kv);
    ctx.set_loras(std::move(loras));
    std::vector<int32_t> out;
    auto logits = ctx.forward(prompt);
    for (int i = 0; i < n; ++i) {
        const int32_t t =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        if (tok.is_eog(t)) break;
        out.push_back(t);
        logits = ctx.forward(std::span<const int32_t>(&t, 1));
    }
    return out;
}

GenerationParams greedy(int n) {
    GenerationParams p;
    p.max_tokens = n;
    p.sampling.temperature = 0;
    return p;
}

// A request's greedy tokens (and with `logprobs` their log-probabilities) against a context of
// `alone` given the same prompt.
void expect_as_alone(const model::Model& alone, const std::vector<int32_t>& prompt,
                     const Collector& got, const std::string& what, bool logprobs = false) {
    model::Context ctx(alone, 128, 2);
    auto logits = ctx.forward(prompt);
    for (size_t i = 0; i < got.tokens.size(); ++i) {
        const int32_t t =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        ASSERT_EQ(got.tokens[i], t) << what << " token " << i;
        if (logprobs) {
            double sum = 0;
            for (float l : logits) sum += std::exp(static_cast<double>(l - logits[t]));
            // The same rows' math alone: float rounding apart, far below routing's differences.
            EXPECT_NEAR(got.logprobs[i], -std::log(sum), 1e-4) << what << " token " << i;
        }
        logits = ctx.forward(std::span<const int32_t>(&t, 1));
    }
}

// Also with a linear-attention layer: its recurrent state starts anew after a preemption and
// catches up over a matched prefix's pages. And with quantized KV caches ("arch@types"): pages
// hold the same blocks as a Context's cache, K and V each in its own type (a conv hybrid's rows
// in F16 beside them).
class EngineArchs : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineArchs, ConcurrentGreedyRequestsMatchEachAloneDespitePreemption) {
    const std::string param = GetParam();
    const size_t at = param.find('@');
    const auto m = make_model(param.substr(0, at));
    const model::KvTypes kv = at == std::string::npos
                                  ? model::KvTypes{}
                                  : model::kv_types_from_name(param.substr(at + 1));
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    EngineConfig cfg;
    cfg.kv_types = kv;
    cfg.threads = 2;
    cfg.page_size = 4;
    cfg.n_pages = 40;  // 160 positions for 16 sequences of up to 40: preemptions
    cfg.parallel = 16;
    cfg.token_budget = 31;  // every step stays on the per-row matmul path
    cfg.n_ctx = 128;
    Engine engine(m, tok, cfg);

    std::mt19937 rng(9);
    const int V = m->hparams().n_vocab;
    std::vector<int32_t> shared(12);
    for (auto& t : shared) t = static_cast<int32_t>(3 + rng() % (V - 3));
    std::vector<std::vector<int32_t>> prompts;
    for (int r = 0; r < 16; ++r) {
        std::vector<int32_t> p = r % 3 == 0 ? shared : std::vector<int32_t>{};
        const int extra = 1 + static_cast<int>(rng() % 18);
        for (int i = 0; i < extra; ++i) p.push_back(static_cast<int32_t>(3 + rng() % (V - 3)));
        prompts.push_back(p);
    }
    std::vector<Collector> got(16);
    for (int r = 0; r < 16; ++r) {
        Refusal err;
        ASSERT_TRUE(engine.submit(prompts[r], greedy(12), got[r].callback(), nullptr, &err))
            << err.message;
    }
    for (auto& c : got) c.wait();
    const EngineStats st = engine.stats();
    EXPECT_GT(st.preemptions, 0) << "the pool was meant to force preemptions";
    EXPECT_GT(st.prefix_hit_tokens, 0);
    for (int r = 0; r < 16; ++r) {
        EXPECT_EQ(got[r].tokens, greedy_alone(*m, tok, prompts[r], 12, kv)) << "request " << r;
        EXPECT_TRUE(got[r].finish == "length" || got[r].finish == "stop");
    }
    engine.drain();
    EXPECT_EQ(engine.stats().kv_pages_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Engine, EngineArchs,
                         ::testing::Values("llama", "llama_linear", "llama_hd32@q8_0",
                                           "llama_linear_hd32@q4_0/q8_0", "llama_conv_hd32@q4_1",
                                           "llama_local_global_hd32@q5_0/f16"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (char& ch : n)
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return n;
                         });

// A model whose every layer has a window gives back each sequence's pages before its window
// (KvPages::drop_before): 4 sequences of 70 positions (18 pages of 4 each) run in a pool of 24
// pages without a preemption, and each gets the tokens it gets alone.
// With global tokens (3: one page of 4) each sequence also keeps its first page. With BigBird's
// random blocks (2 of 16 positions) nothing is dropped: the same tokens from a pool that holds
// every page. A model with a local and a global layer keeps every page of its global layer
// (4 x 18) and a ring of 32 pages for the local one (which would need 72 without dropping);
// with kv_ring off, one group of 72 pages.
TEST(Engine, AWindowedModelHoldsOnlyEachWindowsPages) {
    struct Case {
        int global, random;
        bool mixed, ring = true;
    };
    for (const Case& k : {Case{0, 0, false}, Case{3, 0, false}, Case{0, 2, false}, Case{0, 0, true},
                          Case{0, 0, true, false}}) {
        model::InitConfig c = testing::small_model_config("llama", 128, 35);
        c.window = 6;
        c.global_tokens = k.global;
        c.random_blocks = k.random;
        c.random_block_size = 16;
        if (k.mixed) c.local_layers = {true, false};
        const auto m = std::make_shared<const model::Model>(
            testing::write_test_model("engine_swa" + std::to_string(k.global) + "_" +
                                          std::to_string(k.random) + (k.mixed ? "_mixed" : ""),
                                      c));
        const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
        EngineConfig cfg;
        cfg.threads = 2;
        cfg.page_size = 4;
        cfg.n_pages = k.random > 0 || k.mixed ? 4 * 18 : k.global > 0 ? 28 : 24;
        cfg.kv_ring = k.ring;
        cfg.parallel = 4;
        cfg.token_budget = 16;
        cfg.n_ctx = 128;
        Engine engine(m, tok, cfg);
        EXPECT_EQ(engine.kv_config().groups(), k.mixed && k.ring ? 2 : 1);
        EXPECT_EQ(engine.kv_config().ring_pages, k.mixed && k.ring ? 32 : 0);
        std::mt19937 rng(3);
        const int V = m->hparams().n_vocab;
        std::vector<std::vector<int32_t>> prompts(4);
        for (auto& p : prompts)
            for (int i = 0; i < 10; ++i) p.push_back(static_cast<int32_t>(3 + rng() % (V - 3)));
        std::vector<Collector> got(4);
        GenerationParams gp = greedy(60);
        gp.ignore_eos = true;
        for (int r = 0; r < 4; ++r) {
            Refusal err;
            ASSERT_TRUE(engine.submit(prompts[r], gp, got[r].callback(), nullptr, &err))
                << err.message;
        }
        for (auto& g : got) g.wait();
        EXPECT_EQ(engine.stats().preemptions, 0);
        for (int r = 0; r < 4; ++r) {
            EXPECT_EQ(got[r].tokens.size(), 60u);
            expect_as_alone(*m, prompts[r], got[r], "request " + std::to_string(r));
        }
        engine.drain();
        EXPECT_EQ(engine.stats().kv_pages_used, 0);
    }
}

// The pool of a local/global model: by default the global layer's pages for parallel x n_ctx
// positions and a ring of each sequence's window and chunk (twice the window, for cached
// prefixes); a --kv-memory budget scales both together and refuses one that holds too little.
TEST(Engine, KvMemorySplitsBetweenTheGlobalPagesAndTheRing) {
    const model::Model m(testing::write_test_model(
        "engine_kv_split", testing::small_model_config("llama_local_global", 128, 5)));
    EngineConfig c;
    c.page_size = 4;
    c.parallel = 4;
    c.token_budget = 16;
    c.n_ctx = 128;
    KvPagesConfig k = kv_pages_config(m, c);
    ASSERT_EQ(k.groups(), 2);
    EXPECT_EQ(k.n_pages, 4 * 32);
    EXPECT_EQ(k.ring_pages, 4 * (2 * 1 + 3) + 4);  // window 5: one page of 4 before a position
    EXPECT_EQ(k.page_bytes(0), 2u * 16 * 2 * 4);   // one layer's K and V, 16 wide, f16
    EXPECT_EQ(k.page_bytes(1), k.page_bytes(0));
    c.kv_memory = k.bytes() / 2;
    k = kv_pages_config(m, c);
    EXPECT_EQ(k.n_pages, 64);
    EXPECT_EQ(k.ring_pages, 12);
    EXPECT_LE(k.bytes(), c.kv_memory);
    c.kv_memory = 1000;
    EXPECT_THROW(kv_pages_config(m, c), Error);
    c.kv_ring = false;
    c.kv_memory = 0;
    EXPECT_EQ(kv_pages_config(m, c).groups(), 1);
}

// A test model with the length-policy keys `keys` adds (the file `syslm tune` writes).
std::string with_policy(const std::string& name, const model::InitConfig& c,
                        const std::function<void(io::GGUFWriter&)>& keys) {
    const io::GGUFFile base(testing::write_test_model(name + "_base", c));
    io::GGUFWriter w;
    for (const auto& [k, v] : base.metadata()) w.set(k, v);
    keys(w);
    for (const auto& t : base.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    const std::string path = std::string(SYSLM_TEST_TMP) + "/" + name + ".gguf";
    w.write(path);
    return path;
}

// The policy tests' engine: 64 pages of 4, contexts of 128.
EngineConfig policy_engine() {
    EngineConfig cfg;
    cfg.threads = 2;
    cfg.page_size = 4;
    cfg.n_pages = 64;
    cfg.n_ctx = 128;
    return cfg;
}

// A prompt of 9 tokens and one of 12 starting with it (their first two pages equal): with
// max_tokens 10, lengths 19 and 22 either side of a policy's 20.
std::pair<std::vector<int32_t>, std::vector<int32_t>> short_and_long(uint32_t seed, int V) {
    std::mt19937 rng(seed);
    std::vector<int32_t> short_prompt, long_prompt;
    for (int i = 0; i < 9; ++i) short_prompt.push_back(static_cast<int32_t>(3 + rng() % (V - 3)));
    long_prompt = short_prompt;
    for (int i = 0; i < 3; ++i) long_prompt.push_back(static_cast<int32_t>(3 + rng() % (V - 3)));
    return {short_prompt, long_prompt};
}

// window_auto: each request's local layers run with the window the model's policy gives its
// length (prompt + max_tokens): 3 up to 20 positions, 6 beyond. A request of either kind gets
// the tokens a context with that window gets alone, and a longer request whose prompt starts
// with a shorter one's cached pages does not take them (their K/V came from the other window).
TEST(Engine, AutoWindowRunsEachRequestWithItsPolicysWindow) {
    model::InitConfig c = testing::small_model_config("llama", 128, 37);
    c.window = 6;
    const std::string path = with_policy("engine_auto_window", c, [](io::GGUFWriter& w) {
        const std::vector<uint32_t> lengths = {20, 1000}, windows = {3, 6};
        w.set("llama.attention.window_policy.lengths", io::GGUFValue::u32s(lengths));
        w.set("llama.attention.window_policy.windows", io::GGUFValue::u32s(windows));
    });
    const auto m = std::make_shared<const model::Model>(path);
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    EngineConfig cfg = policy_engine();
    cfg.window_auto = true;
    Engine engine(m, tok, cfg);
    // The long prompt is short enough that its first generated tokens still attend (at layer 1)
    // to positions of the shared pages, whose K/V depend on the window.
    const auto [short_prompt, long_prompt] = short_and_long(5, m->hparams().n_vocab);
    GenerationParams gp = greedy(10);
    gp.ignore_eos = true;
    Collector a, b;
    ASSERT_TRUE(engine.submit(short_prompt, gp, a.callback(), nullptr, nullptr));  // 19: w 3
    a.wait();
    ASSERT_TRUE(engine.submit(long_prompt, gp, b.callback(), nullptr, nullptr));  // 22: w 6
    b.wait();
    EXPECT_EQ(engine.stats().prefix_hit_tokens, 0);  // the short one's pages are window 3's
    Collector again;  // the short prompt once more: its own window's pages are taken
    ASSERT_TRUE(engine.submit(short_prompt, gp, again.callback(), nullptr, nullptr));
    again.wait();
    EXPECT_EQ(engine.stats().prefix_hit_tokens, 8);
    EXPECT_EQ(again.tokens, a.tokens);
    for (const auto& [got, prompt, window] :
         {std::tuple{&a, &short_prompt, 3}, std::tuple{&b, &long_prompt, 6}}) {
        model::Model alone(path);
        alone.set_window(window);
        ASSERT_EQ(got->tokens.size(), 10u);
        expect_as_alone(alone, *prompt, *got, "window " + std::to_string(window));
    }
    EngineConfig no_policy = cfg;
    EXPECT_THROW({ Engine refused(make_model(), tok, no_policy); }, syslm::Error);
    engine.drain();
}

// expert_auto: each request's top-p MoE layers route with the p the model's policy gives its
// length (prompt + max_tokens): 0.2 up to 20 positions, 0.9 beyond. Two such requests in the
// same steps get the tokens a context with their p gets alone, and the cached pages of one p
// serve only requests with that p.
TEST(Engine, AutoExpertTopPRoutesEachRequestWithItsPolicysP) {
    const std::string path =
        with_policy("engine_auto_experts", testing::small_model_config("mixtral_top_p", 128, 41),
                    [](io::GGUFWriter& w) {
                        const std::vector<uint32_t> lengths = {20, 1000};
                        const std::vector<float> top_p = {0.2f, 0.9f};
                        w.set("llama.expert_policy.lengths", io::GGUFValue::u32s(lengths));
                        w.set("llama.expert_policy.top_p", io::GGUFValue::f32s(top_p));
                    });
    const auto m = std::make_shared<const model::Model>(path);
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    EngineConfig cfg = policy_engine();
    cfg.expert_auto = true;
    Engine engine(m, tok, cfg);
    const auto [short_prompt, long_prompt] = short_and_long(7, m->hparams().n_vocab);
    GenerationParams gp = greedy(10);
    gp.ignore_eos = true;
    gp.logprobs = 0;  // each token's log-probability: what routing changes, if not the argmax
    Collector a, b, a2, b2;
    ASSERT_TRUE(engine.submit(short_prompt, gp, a.callback(), nullptr, nullptr));  // 19: p 0.2
    a.wait();
    ASSERT_TRUE(engine.submit(long_prompt, gp, b.callback(), nullptr, nullptr));  // 22: p 0.9
    b.wait();
    EXPECT_EQ(engine.stats().prefix_hit_tokens, 0);  // the short one's pages are p 0.2's
    // Both once more, in the same steps: each takes the pages of its own p, routes its own way.
    ASSERT_TRUE(engine.submit(short_prompt, gp, a2.callback(), nullptr, nullptr));
    ASSERT_TRUE(engine.submit(long_prompt, gp, b2.callback(), nullptr, nullptr));
    a2.wait();
    b2.wait();
    EXPECT_EQ(engine.stats().prefix_hit_tokens, 16);
    EXPECT_EQ(a2.tokens, a.tokens);
    EXPECT_EQ(b2.tokens, b.tokens);
    for (const auto& [got, prompt, p] :
         {std::tuple{&a, &short_prompt, 0.2f}, std::tuple{&b, &long_prompt, 0.9f}}) {
        model::Model alone(path);
        alone.set_expert_top_p(p);
        ASSERT_EQ(got->tokens.size(), 10u);
        ASSERT_EQ(got->logprobs.size(), 10u);
        expect_as_alone(alone, *prompt, *got, "top-p " + std::to_string(p), /*logprobs=*/true);
    }
    engine.drain();
}

TEST(Engine, StopsCancelsAndRefuses) {
    const auto m = make_model();
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    EngineConfig cfg;
    cfg.threads = 2;
    cfg.n_pages = 64;
    cfg.max_waiting = 64;
    cfg.n_ctx = 100;
    Engine engine(m, tok, cfg);
    const std::vector<int32_t> prompt = {1, 450, 4996, 17354};

    Collector plain;  // reference text
    ASSERT_TRUE(engine.submit(prompt, greedy(10), plain.callback(), nullptr, nullptr));
    plain.wait();
    EXPECT_EQ(plain.finish, "length");
    EXPECT_EQ(plain.tokens.size(), 10u);
    ASSERT_GT(plain.text.size(), 4u);

    // A stop string taken from the middle of that text: output ends right before it.
    const std::string stop = plain.text.substr(plain.text.size() / 2, 3);
    GenerationParams p = greedy(10);
    p.stop = {stop};
    Collector stopped;
    ASSERT_TRUE(engine.submit(prompt, p, stopped.callback(), nullptr, nullptr));
    stopped.wait();
    EXPECT_EQ(stopped.finish, "stop");
    EXPECT_EQ(stopped.text, plain.text.substr(0, plain.text.find(stop)));

    Collector cancelled;
    cancelled.stop_after = 3;
    ASSERT_TRUE(engine.submit(prompt, greedy(50), cancelled.callback(), nullptr, nullptr));
    cancelled.wait();
    EXPECT_EQ(cancelled.finish, "cancelled");
    EXPECT_EQ(cancelled.tokens.size(), 3u);

    // Refusals are typed (the server answers each with its own status) and say what is wrong.
    auto refused = [&](std::vector<int32_t> p, Failure kind, const char* says) {
        Refusal err;
        EXPECT_FALSE(engine.submit(std::move(p), greedy(4), plain.callback(), nullptr, &err));
        EXPECT_EQ(err.kind, kind) << err.message;
        EXPECT_NE(err.message.find(says), std::string::npos) << err.message;
    };
    refused({}, Failure::InvalidRequest, "empty");
    refused({1, 999999}, Failure::InvalidRequest, "vocabulary");
    refused(std::vector<int32_t>(100, 5), Failure::InvalidRequest, "context");
    engine.drain();
    refused(prompt, Failure::ShuttingDown, "shutting down");
}

// Prefix tiers: six 40-token prompts asked twice, one at a time (the second round in reverse),
// through a pool of 24 pages (10 a prompt): the second round finds the first's pages, evicted to
// RAM (20 pages) and disk, brought back, and its tokens are those of the first round (and of each
// prompt alone). Without the tiers the same rounds find nothing: the pool kept only the last
// prompts' pages.
TEST(Engine, EvictedPrefixesComeBackFromTheTiersWithTheSameTokens) {
    const auto m = make_model();
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    std::mt19937 rng(21);
    const int V = m->hparams().n_vocab;
    std::vector<std::vector<int32_t>> prompts(6, std::vector<int32_t>(40));
    for (auto& p : prompts)
        for (auto& t : p) t = static_cast<int32_t>(3 + rng() % (V - 3));
    int64_t hit_tokens[2] = {};
    for (const bool tiers : {true, false}) {
        EngineConfig cfg;
        cfg.threads = 2;
        cfg.page_size = 4;
        cfg.n_pages = 24;
        cfg.parallel = 1;
        cfg.n_ctx = 128;
        if (tiers) {
            const size_t page = kv_pages_config(*m, cfg).page_bytes();
            cfg.prefix_tiers.ram_bytes = 20 * page;
            cfg.prefix_tiers.disk_dir = std::string(SYSLM_TEST_TMP) + "/engine_tiers";
            cfg.prefix_tiers.disk_bytes = 100 * page;
        }
        Engine engine(m, tok, cfg);
        std::vector<std::vector<int32_t>> first;
        for (int round = 0; round < 2; ++round)
            for (size_t i = 0; i < prompts.size(); ++i) {
                const size_t r = round == 0 ? i : prompts.size() - 1 - i;
                Collector c;
                ASSERT_TRUE(engine.submit(prompts[r], greedy(5), c.callback(), nullptr, nullptr));
                c.wait();
                if (round == 0) {
                    first.push_back(c.tokens);
                    EXPECT_EQ(c.tokens, greedy_alone(*m, tok, prompts[r], 5)) << r;
                } else {
                    EXPECT_EQ(c.tokens, first[r]) << "request " << r << " tiers " << tiers;
                }
            }
        const EngineStats st = engine.stats();
        hit_tokens[tiers ? 0 : 1] = st.prefix_hit_tokens;
        if (tiers) {
            EXPECT_GT(st.prefix_pages.ram, 0);
            EXPECT_GT(st.prefix_pages.disk, 0);
            EXPECT_EQ(st.prefix_tiers.bad_files, 0);
            // Every page of the second round's prompts (9 whole ones before the last token).
            EXPECT_EQ(st.prefix_hit_tokens, 6 * 9 * 4);
        }
        engine.drain();
    }
    EXPECT_LT(hit_tokens[1], hit_tokens[0] / 2);
}

// Constrained decoding: concurrent requests under a grammar (JSON objects, and a GBNF list),
// greedy and sampled, batched in the same steps, each produce only text the grammar allows; one
// that ends by itself ("stop") ends on a whole sentence. Free-text requests beside them are
// untouched (their greedy tokens as alone).
TEST(Engine, GrammarRequestsProduceOnlyWhatTheirGrammarAllows) {
    const auto m = make_model();
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    EngineConfig cfg;
    cfg.threads = 2;
    cfg.parallel = 8;
    cfg.n_ctx = 128;
    Engine engine(m, tok, cfg);
    const auto json =
        std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(grammar::json_object_gbnf()));
    const auto list = std::make_shared<const grammar::Grammar>(
        grammar::parse_gbnf("root ::= item{1,3}\nitem ::= \"- \" [a-z ]{1,12} \"\\n\""));
    std::vector<int32_t> prompt{5, 17, 300, 41, 9};
    std::vector<Collector> got(7);
    std::vector<std::shared_ptr<const grammar::Grammar>> grammars;
    for (int r = 0; r < 7; ++r) {
        GenerationParams p = greedy(r < 6 ? 80 : 10);
        if (r % 2 == 1) {
            p.sampling.temperature = 1.0f;
            p.sampling.seed = static_cast<uint64_t>(r);
        }
        grammars.push_back(r < 4 ? json : r < 6 ? list : nullptr);
        p.grammar = grammars.back();
        ASSERT_TRUE(engine.submit(prompt, p, got[r].callback(), nullptr, nullptr));
    }
    int ended = 0;
    for (int r = 0; r < 7; ++r) {
        got[r].wait();
        if (!grammars[r]) {
            EXPECT_EQ(got[r].tokens, greedy_alone(*m, tok, prompt, 10));
            continue;
        }
        grammar::Matcher check(grammars[r]);
        EXPECT_TRUE(check.accept(std::string_view(got[r].text))) << r << ": " << got[r].text;
        EXPECT_FALSE(got[r].text.empty()) << r;
        if (got[r].finish == "stop") {
            EXPECT_TRUE(check.can_end()) << r << ": " << got[r].text;
            ++ended;
        }
    }
    EXPECT_GT(ended, 0);  // the list grammar ends by itself within 80 tokens
    EXPECT_GT(engine.stats().grammar_masks, 0);
}

// A lazy grammar (tool_choice auto): the answer is the free run's until the trigger appears in it,
// and from there on keeps to the grammar, which describes what follows the trigger.
TEST(Engine, ALazyGrammarHoldsFromItsTriggerOn) {
    const auto m = make_model();
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    EngineConfig cfg;
    cfg.threads = 2;
    cfg.n_ctx = 128;
    Engine engine(m, tok, cfg);
    const std::vector<int32_t> prompt{5, 17, 300, 41, 9};
    Collector free_run;
    ASSERT_TRUE(engine.submit(prompt, greedy(30), free_run.callback(), nullptr, nullptr));
    free_run.wait();
    // The trigger: a later token's text whose first appearance in the answer is that token's.
    std::string trigger;
    size_t end = 0, at = 0;  // the trigger's end; a token's offset in the answer
    for (size_t i = 0; i < free_run.tokens.size(); ++i) {
        const std::string& piece = tok.token_to_piece(free_run.tokens[i]);
        if (i >= 4 && piece.size() >= 2 && free_run.text.find(piece) == at) {
            trigger = piece;
            end = at + piece.size();
            break;
        }
        at += piece.size();
    }
    ASSERT_FALSE(trigger.empty()) << free_run.text;
    const auto list = std::make_shared<const grammar::Grammar>(
        grammar::parse_gbnf("root ::= item{1,3}\nitem ::= \"- \" [a-z ]{1,12} \"\\n\""));
    GenerationParams p = greedy(30);
    p.grammar = list;
    p.grammar_trigger = trigger;
    Collector lazy;
    ASSERT_TRUE(engine.submit(prompt, p, lazy.callback(), nullptr, nullptr));
    lazy.wait();
    ASSERT_GT(lazy.text.size(), end) << lazy.text;
    EXPECT_EQ(lazy.text.substr(0, end), free_run.text.substr(0, end));
    grammar::Matcher check(list);
    EXPECT_TRUE(check.accept(std::string_view(lazy.text).substr(end))) << lazy.text;
    EXPECT_EQ(lazy.text.substr(end, 2), "- ");
}

// Requests with different LoRA adapters (none, A, B, A at half scale, A and B together) run in
// the same steps and each gets the tokens a context with its adapters gets alone; their shared
// prompt's cached pages serve only requests with the same adapters.
TEST(Engine, RequestsWithDifferentAdaptersShareStepsAndEachGetsItsOwn) {
    const auto m = make_model();
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    EngineConfig cfg;
    cfg.threads = 2;
    cfg.parallel = 8;
    cfg.n_ctx = 128;
    testing::RandomLora ra, rb;
    rb.seed = 8;
    rb.rank = 5;
    rb.targets = {"attn_v", "ffn_down"};
    cfg.loras = {{"a", std::make_shared<const model::LoraAdapter>(
                           testing::write_random_lora(*m, "engine_a", ra), *m)},
                 {"b", std::make_shared<const model::LoraAdapter>(
                           testing::write_random_lora(*m, "engine_b", rb), *m)}};
    const model::LoraAdapter *a = cfg.loras[0].adapter.get(), *b = cfg.loras[1].adapter.get();
    Engine engine(m, tok, cfg);
    std::vector<int32_t> prompt = testing::random_ids(37, 12);  // 2 full pages of 16, shared
    using C = GenerationParams::LoraChoice;
    const std::vector<std::vector<C>> choices = {{}, {{0, 1}}, {{1, 1}}, {{0, 0.5f}},
                                                 {{1, 1}, {0, 1}}, {{0, 1}}};
    const std::vector<std::vector<model::LoraUse>> uses = {
        {}, {{a, 1, {}}}, {{b, 1, {}}}, {{a, 0.5f, {}}}, {{a, 1, {}}, {b, 1, {}}}, {{a, 1, {}}}};
    std::vector<Collector> got(choices.size());
    for (size_t r = 0; r < choices.size(); ++r) {
        GenerationParams p = greedy(12);
        p.ignore_eos = true;
        p.lora = choices[r];
        prompt.back() = static_cast<int32_t>(100 + r);  // the last token differs: no whole match
        ASSERT_TRUE(engine.submit(prompt, p, got[r].callback(), nullptr, nullptr));
    }
    for (size_t r = 0; r < choices.size(); ++r) {
        got[r].wait();
        prompt.back() = static_cast<int32_t>(100 + r);
        EXPECT_EQ(got[r].tokens, greedy_alone(*m, tok, prompt, 12, {}, uses[r])) << r;
    }
    EXPECT_NE(got[0].tokens, got[1].tokens);
    EXPECT_NE(got[1].tokens, got[3].tokens);
    // Again, each prompt now with another request's adapters: the pages the first wave cached
    // serve only the requests whose adapters computed them.
    const int64_t hits_before = engine.stats().prefix_hit_tokens;
    for (size_t r = 0; r < choices.size(); ++r) {
        const size_t other = choices.size() - 1 - r;
        GenerationParams p = greedy(6);
        p.ignore_eos = true;
        p.lora = choices[other];
        prompt.back() = static_cast<int32_t>(100 + r);
        Collector again;
        ASSERT_TRUE(engine.submit(prompt, p, again.callback(), nullptr, nullptr));
        again.wait();
        EXPECT_EQ(again.tokens, greedy_alone(*m, tok, prompt, 6, {}, uses[other])) << r;
    }
    EXPECT_GT(engine.stats().prefix_hit_tokens, hits_before);  // same adapters did hit
    Refusal why;
    GenerationParams bad = greedy(2);
    bad.lora = {{2, 1}};
    EXPECT_FALSE(engine.submit(prompt, bad, [](const Event&) { return true; }, nullptr, &why));
    EXPECT_NE(why.message.find("LoRA adapter id 2"), std::string::npos);
    engine.drain();
}

// A request the whole KV pool cannot hold ends typed as such (the server answers it 400, not 500),
// and the engine goes on serving the requests that fit.
TEST(Engine, ARequestLargerThanTheKvPoolEndsWithItsOwnFailureKind) {
    const auto m = make_model();
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    EngineConfig cfg;
    cfg.threads = 2;
    cfg.page_size = 4;
    cfg.n_pages = 5;  // 20 positions in all
    cfg.parallel = 2;
    cfg.n_ctx = 128;
    Engine engine(m, tok, cfg);
    std::vector<int32_t> big(37);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int32_t>(3 + (i * 7) % 50);
    struct Ended {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
        FinishReason reason = FinishReason::Stop;
        Refusal error;
    } ended;
    ASSERT_TRUE(engine.submit(
        big, greedy(4),
        [&](const Event& e) {
            if (!e.done) return true;
            std::lock_guard lk(ended.mu);
            ended.done = true;
            ended.reason = e.finish_reason;
            ended.error = e.error;
            ended.cv.notify_all();
            return true;
        },
        nullptr, nullptr));
    {
        std::unique_lock lk(ended.mu);
        ended.cv.wait(lk, [&] { return ended.done; });
    }
    EXPECT_EQ(ended.reason, FinishReason::Error);
    EXPECT_EQ(ended.error.kind, Failure::KvPoolTooSmall);
    EXPECT_NE(ended.error.message.find("KV memory"), std::string::npos) << ended.error.message;
    EXPECT_STREQ(finish_reason_name(ended.reason), "error");

    Collector small;
    ASSERT_TRUE(engine.submit({5, 6, 7}, greedy(3), small.callback(), nullptr, nullptr));
    small.wait();
    EXPECT_EQ(small.finish, "length");
}

}  // namespace
}  // namespace syslm::infer
