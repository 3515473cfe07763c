// The serving engine end to end on a random-initialised model: 16 concurrent greedy requests
// (mixed lengths, shared prefixes) on a KV pool small enough to force preemptions give each the
// tokens it gets alone; max_tokens, stop strings, cancellation, the bounded queue and bad
// requests behave; every page comes back.
#include "infer/engine.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <random>

#include "../common/random_model.hpp"

namespace syslm::infer {
namespace {

std::shared_ptr<const model::Model> make_model() {
    return std::make_shared<const model::Model>(testing::write_test_model(
        "engine_llama", testing::small_model_config("llama", 128, 33)));
}

// Collects one request's events.
struct Collector {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> tokens;
    std::string text, finish;
    bool done = false;
    int stop_after = -1;  // cancel after this many tokens
    Engine::Callback callback() {
        return [this](const Event& e) {
            std::lock_guard lk(mu);
            if (e.token >= 0) tokens.push_back(e.token);
            text += e.text;
            if (e.done) {
                done = true;
                finish = e.finish_reason;
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
                                  const std::vector<int32_t>& prompt, int n) {
    model::Context ctx(m, 128, 2);
    std::vector<int32_t> out;
    auto logits = ctx.forward(prompt);
    for (int i = 0; i < n; ++i) {
        const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                               logits.begin());
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

TEST(Engine, ConcurrentGreedyRequestsMatchEachAloneDespitePreemption) {
    const auto m = make_model();
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    EngineConfig cfg;
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
        std::string err;
        ASSERT_TRUE(engine.submit(prompts[r], greedy(12), got[r].callback(), nullptr, &err)) << err;
    }
    for (auto& c : got) c.wait();
    const EngineStats st = engine.stats();
    EXPECT_GT(st.preemptions, 0) << "the pool was meant to force preemptions";
    EXPECT_GT(st.prefix_hit_tokens, 0);
    for (int r = 0; r < 16; ++r) {
        EXPECT_EQ(got[r].tokens, greedy_alone(*m, tok, prompts[r], 12)) << "request " << r;
        EXPECT_TRUE(got[r].finish == "length" || got[r].finish == "stop");
    }
    engine.drain();
    EXPECT_EQ(engine.stats().kv_pages_used, 0);
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

    std::string err;
    EXPECT_FALSE(engine.submit({}, greedy(4), plain.callback(), nullptr, &err));
    EXPECT_NE(err.find("empty"), std::string::npos);
    EXPECT_FALSE(engine.submit({1, 999999}, greedy(4), plain.callback(), nullptr, &err));
    EXPECT_NE(err.find("vocabulary"), std::string::npos);
    EXPECT_FALSE(engine.submit(std::vector<int32_t>(100, 5), greedy(4), plain.callback(), nullptr,
                               &err));
    EXPECT_NE(err.find("context"), std::string::npos);
    engine.drain();
    EXPECT_FALSE(engine.submit(prompt, greedy(4), plain.callback(), nullptr, &err));
    EXPECT_NE(err.find("shutting down"), std::string::npos);
}

}  // namespace
}  // namespace syslm::infer
