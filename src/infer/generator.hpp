// What the server asks of whatever produces its tokens: the engine (infer/engine: continuous
// batching on this machine), or an edge that decodes together with a cloud across a link
// (serve/edge_generator). Requests in, events out; the types both speak.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.hpp"
#include "infer/kv_pages.hpp"
#include "infer/sampler.hpp"
#include "model/lora.hpp"
#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::infer {

// A LoRA adapter a request may pick by its index (GenerationParams::lora).
struct NamedLora {
    std::string name;
    std::shared_ptr<const model::LoraAdapter> adapter;
};

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
    // on the grammar holds, describing what follows the trigger (tool calls under tool_choice
    // auto).
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
    Upstream,        // an edge's cloud failed where the edge cannot go on alone (a split model)
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
    // With done: why this answer is not what the server normally gives (an edge whose cloud
    // failed answered alone); empty otherwise.
    std::string fallback;
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

class Generator {
public:
    virtual ~Generator() = default;

    // Called for every event of a request, on the generator's thread; must be quick. Returning
    // false cancels the request.
    using Callback = std::function<bool(const Event&)>;
    // Queues a request; false with `refused` set when it is refused (InvalidRequest, QueueFull,
    // ShuttingDown). The callback then is never called.
    virtual bool submit(std::vector<int32_t> prompt, const GenerationParams& params, Callback cb,
                        int64_t* id, Refusal* refused) = 0;
    virtual void cancel(int64_t id) = 0;
    // Stops accepting, lets every queued and running request finish, then stops.
    virtual void drain() = 0;
    virtual EngineStats stats() = 0;
    // Lines of Prometheus text for /metrics beyond EngineStats' (an edge's link).
    virtual std::string extra_metrics() { return {}; }

    virtual const model::Model& model() const = 0;
    virtual const tokenizer::Tokenizer& tokenizer() const = 0;
    virtual int n_ctx() const = 0;    // positions per request (prompt + generated)
    virtual int threads() const = 0;  // for work beside the generation (embeddings); 0: all cores
    virtual const std::vector<NamedLora>& loras() const = 0;
};

}  // namespace syslm::infer
