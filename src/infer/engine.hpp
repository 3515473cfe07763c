// The serving engine: requests in, token streams out. One thread runs steps: the scheduler
// picks the step's work (continuous batching over the paged KV pool), one model::Forward runs
// every scheduled sequence's rows at once (each weight read once per step), each sequence whose
// pending tokens are done samples its next token with its own sampler, and the request's
// callback receives the text (UTF-8 complete, held back while it could still become a stop
// string). Callbacks run on the engine thread and must be quick (the server's push into a
// queue); returning false cancels the request.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.hpp"
#include "grammar/token_masks.hpp"
#include "infer/generator.hpp"
#include "infer/kv_pages.hpp"
#include "infer/paged_rows.hpp"
#include "infer/sampler.hpp"
#include "infer/scheduler.hpp"
#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::infer {

struct EngineConfig {
    int threads = 0;          // 0: all cores
    int page_size = 16;       // positions per KV page
    int n_pages = 0;          // 0: from kv_memory
    size_t kv_memory = 0;     // bytes of K/V (when n_pages is 0); 0: enough for `parallel` x n_ctx
    model::KvTypes kv_types;  // of the pages' keys and values (serve --cache-type-k / -v)
    int parallel = 16;        // sequences per step
    int64_t token_budget = 512;
    int max_waiting = 256;
    int n_ctx = 4096;  // positions per sequence (prompt + generated)
    // Each request's local layers run with the window the model's policy gives its length
    // (prompt + max_tokens; HParams::window_for_length, `serve --window auto`).
    bool window_auto = false;
    // And a top-p MoE model's p (HParams::top_p_for_length, `serve --expert-top-p auto`).
    bool expert_auto = false;
    // Sliding-window layers give back the pages before each sequence's window (a ring of their
    // own pages when the model also has global layers). false: they keep every page, as global
    // layers do (vLLM's --disable-hybrid-kv-cache-manager; `serve --no-kv-ring`).
    bool kv_ring = true;
    // Where evicted prefix pages go, and come back from (`serve --prefix-cache-ram / -dir /
    // -disk`); off by default.
    PrefixTiersConfig prefix_tiers;
    bool prefix_cache = true;  // false: no prefix sharing at all (`serve --no-prefix-cache`)
    // LoRA adapters requests may pick by index (GenerationParams::lora; `serve --lora
    // name=file`). Rows of different adapters share a step: the base product runs once for all.
    using NamedLora = infer::NamedLora;
    std::vector<NamedLora> loras;
};

// The engine's KV pool for a model: every layer's pages in one group, or, for a model that mixes
// sliding-window layers with global ones, the windowed layers' in a ring of their own sized for
// `parallel` sequences' windows (KvPagesConfig::ring_layers). n_pages (else kv_memory, else
// parallel x n_ctx positions) sizes the global layers' group.
KvPagesConfig kv_pages_config(const model::Model& m, const EngineConfig& c);

class Engine final : public Generator {
public:
    Engine(std::shared_ptr<const model::Model> model, tokenizer::Tokenizer tok,
           const EngineConfig& cfg);
    ~Engine();  // stops at once (in-flight requests end "cancelled")

    bool submit(std::vector<int32_t> prompt, const GenerationParams& params, Callback cb,
                int64_t* id, Refusal* refused) override;
    void cancel(int64_t id) override;
    void drain() override;
    EngineStats stats() override;

    const model::Model& model() const override { return *model_; }
    const tokenizer::Tokenizer& tokenizer() const override { return tok_; }
    int n_ctx() const override { return cfg_.n_ctx; }
    int threads() const override { return cfg_.threads; }
    const std::vector<NamedLora>& loras() const override { return cfg_.loras; }
    const EngineConfig& config() const { return cfg_; }
    const KvPagesConfig& kv_config() const { return pages_.config(); }

private:
    struct Active;
    void loop();
    void step();
    bool emit(Active& a, const Event& e);
    void finish(Active& a, FinishReason reason, Refusal error = {});
    void on_token(Active& a, int32_t token, std::span<const float> logits);
    // Samples a's next token from its logits row (masked by its grammar, if any) and takes it.
    void sample(Active& a, std::span<const float> row);
    // A lazy grammar's wait: switches it on once the output holds its trigger.
    void watch_trigger(Active& a, const std::string& piece);
    // A constrained request's logits with the tokens its grammar forbids at -inf (in masked_);
    // false when it forbids every token.
    bool mask_logits(Active& a, std::span<const float> row);

    std::shared_ptr<const model::Model> model_;
    tokenizer::Tokenizer tok_;
    EngineConfig cfg_;
    KvPages pages_;
    Scheduler scheduler_;
    model::Forward forward_;
    PagedRows rows_;
    std::vector<float> logits_;
    // The batch's LoRA uses: each (adapter, scale) of the step's sequences with their rows.
    std::vector<model::LoraUse> lora_uses(const std::vector<ScheduledWork>& work) const;
    // Each distinct adapter set (sorted choices) gets a number, so that cached pages computed
    // with one serve only sequences with the same (Sequence::lora_variant). Under mu_.
    std::map<std::vector<std::pair<int, float>>, uint32_t> lora_variants_;
    // Constrained decoding (made on the first grammar request, engine thread only).
    std::unique_ptr<grammar::VocabTrie> trie_;
    std::unique_ptr<grammar::MaskCache> masks_;
    std::vector<float> masked_;

    std::mutex mu_;
    std::condition_variable cv_, idle_cv_;
    std::vector<std::unique_ptr<Active>> incoming_;
    std::vector<int64_t> cancels_;
    std::unordered_map<int64_t, std::unique_ptr<Active>> active_;  // engine thread only
    bool accepting_ = true, stop_ = false;
    bool idle_ = true;  // nothing active or arriving (set by the engine thread, under mu_)
    int64_t next_id_ = 1;
    int queued_ = 0;  // incoming + waiting, for the bound
    EngineStats stats_;
    std::vector<std::pair<double, int64_t>> rate_;  // (time, generated total) samples
    std::thread thread_;
};

}  // namespace syslm::infer
