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
    struct NamedLora {
        std::string name;
        std::shared_ptr<const model::LoraAdapter> adapter;
    };
    std::vector<NamedLora> loras;
};

// The engine's KV pool for a model: every layer's pages in one group, or, for a model that mixes
// sliding-window layers with global ones, the windowed layers' in a ring of their own sized for
// `parallel` sequences' windows (KvPagesConfig::ring_layers). n_pages (else kv_memory, else
// parallel x n_ctx positions) sizes the global layers' group.
KvPagesConfig kv_pages_config(const model::Model& m, const EngineConfig& c);

struct GenerationParams {
    int max_tokens = 16;
    SamplingParams sampling;
    std::vector<std::string> stop;
    bool ignore_eos = false;
    int logprobs = -1;  // top alternatives to report per token; -1: no logprobs
    int priority = 0;   // the scheduler runs lower values first, preempting higher ones
    // Constrains the output to the grammar's sentences (JSON, a schema, GBNF); null: free text.
    std::shared_ptr<const grammar::Grammar> grammar;
    // LoRA adapters (EngineConfig::loras indices) and their scales; empty: the base model.
    struct LoraChoice {
        int adapter = 0;
        float scale = 1.0f;
    };
    std::vector<LoraChoice> lora;
    // Non-empty: the grammar is lazy. The output is free until this text appears in it; from there
    // on the grammar holds, describing what follows the trigger (tool calls under tool_choice auto).
    std::string grammar_trigger;
};

struct TokenLogprob {
    int32_t token;
    float logprob;
};

// How a request ended. The names are OpenAI's finish_reason values (finish_reason_name).
enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);

// Why a request was refused at submit, or ended in an error: the server answers each with its own
// HTTP status (serve/completions.cpp), so the kind is typed, the message is for people.
enum class Failure {
    None,
    InvalidRequest,  // empty prompt, unknown token, bad sampling parameters, too long
    QueueFull,       // the waiting queue is at max_waiting
    ShuttingDown,    // drain() or the destructor has begun
    KvPoolTooSmall,  // the request needs more KV memory than the whole pool holds
    StepFailed,      // a forward step threw; every request in it ends
};
struct Refusal {
    Failure kind = Failure::None;
    std::string message;
};

struct Event {
    // A token (text may be empty while held back) or, with done, the end of the request.
    int32_t token = -1;
    std::string text;
    float logprob = 0;
    std::vector<TokenLogprob> top;  // when logprobs >= 0
    bool done = false;
    FinishReason finish_reason = FinishReason::Stop;  // with done
    Refusal error;                                    // with FinishReason::Error
    int64_t n_prompt = 0, n_generated = 0;
};

// Latencies in cumulative buckets (Prometheus histogram semantics: count of samples <= bound).
struct LatencyHistogram {
    static constexpr double kBounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
    int64_t buckets[std::size(kBounds)] = {};
    int64_t count = 0;
    double sum = 0;
    void add(double seconds);
};

struct EngineStats {
    int running = 0, waiting = 0;
    int kv_pages_used = 0, kv_pages_cached = 0, kv_pages_total = 0;  // over every page group
    int64_t kv_bytes_used = 0, kv_bytes_total = 0;
    int64_t kv_positions = 0;  // positions the running sequences hold (for the waste figure)
    int64_t requests = 0, prompt_tokens = 0, generated_tokens = 0;
    int64_t preemptions = 0, prefix_hit_tokens = 0, steps = 0;
    PrefixLookups prefix_pages;  // whole prompt pages asked for, and where each was found
    PrefixTierStats prefix_tiers;
    // Constrained decoding: token masks made (each a trie walk, or a cache hit) and their time.
    int64_t grammar_masks = 0, grammar_mask_cache_hits = 0;
    double grammar_mask_seconds = 0;
    double tokens_per_s = 0;     // generated, over the last few seconds
    LatencyHistogram ttft, itl;  // time to first token, inter-token latency (seconds)
};

class Engine {
public:
    Engine(std::shared_ptr<const model::Model> model, tokenizer::Tokenizer tok,
           const EngineConfig& cfg);
    ~Engine();  // stops at once (in-flight requests end "cancelled")

    using Callback = std::function<bool(const Event&)>;
    // Queues a request; false with `refused` set when it is refused (InvalidRequest, QueueFull,
    // ShuttingDown). The callback then is never called.
    bool submit(std::vector<int32_t> prompt, const GenerationParams& params, Callback cb,
                int64_t* id, Refusal* refused);
    void cancel(int64_t id);
    // Stops accepting, lets every queued and running request finish, then stops the thread.
    void drain();
    EngineStats stats();

    const model::Model& model() const { return *model_; }
    const tokenizer::Tokenizer& tokenizer() const { return tok_; }
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
