// An edge that answers together with its cloud (`serve --role edge`; docs/design/edge_cloud.md).
// Two modes, both over the cloud's sessions (serve/remote_target):
// - speculative (`--verify-at URL`): the edge's small model drafts k tokens, the cloud's model
//   verifies them in one call, so the answer follows the cloud model's distribution (greedy: the
//   cloud's own tokens) while the cloud runs one forward pass per round, not per token; k adapts
//   to the acceptance and the call's cost, which includes the link's round trip
//   (infer/speculative);
// - cascade (`--cascade URL --defer-below P`): the edge answers with its own model and defers to
//   the cloud whenever its top token's probability is below P: for that token (the cloud's
//   session catches up on the edge's tokens and answers its own next one), or for the rest of the
//   request (`--defer request`: the cloud's /v1/completions finishes it).
// - split (`--split-at L --cloud URL`): the edge runs layers [0, L) of the model, the cloud the
//   rest and the head; each token's residual row crosses the link (f16, int8 with a scale per
//   row, or f32) and the cloud answers the next token. Without the cloud the answer cannot go on:
//   it ends with a 502 naming the cloud and the reason.
// Requests run in `slots` workers, each with its own context and connection; the slots' forward
// rows (drafts, a cascade's tokens, a split's layers) run together (infer::ContextBatcher). When the cloud
// fails or passes its deadline, the answer goes on from the edge's model alone and says so
// (Event::fallback, "syslm": {"fallback": ...} in the response).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infer/context_batcher.hpp"
#include "infer/generator.hpp"
#include "infer/speculative.hpp"
#include "infer/wire_rows.hpp"
#include "serve/cloud_link.hpp"

namespace syslm::serve {

enum class EdgeMode { Speculative, Cascade, Split };

struct EdgeConfig {
    EdgeMode mode = EdgeMode::Speculative;
    std::string cloud_url;
    LinkProfile link;  // the simulator (`--link`); zero: the connection as it is
    std::string api_key;
    double call_timeout_s = 5;  // each call to the cloud
    int slots = 4;              // requests decoded at once
    int n_ctx = 4096;
    int threads = 0;  // of each draft forward; 0: all cores
    int max_waiting = 256;
    infer::SpeculativeOptions speculative;
    // Cascade: defer when the edge model's top probability (its softmax, temperature 1) is below
    // this; the rest of the request, not one token, when defer_request.
    double defer_below = 0.5;
    bool defer_request = false;
    // Split: this side runs layers [0, split_at), the cloud the rest and the head; the residual
    // rows cross in `wire`'s format.
    int split_at = 0;
    infer::WireType wire = infer::WireType::F16;
};

class EdgeGenerator final : public infer::Generator {
public:
    EdgeGenerator(std::shared_ptr<const model::Model> draft, tokenizer::Tokenizer tok,
                  const EdgeConfig& cfg);
    ~EdgeGenerator() override;  // stops at once: requests in flight end "cancelled"

    bool submit(std::vector<int32_t> prompt, const infer::GenerationParams& params, Callback cb,
                int64_t* id, infer::Refusal* refused) override;
    void cancel(int64_t id) override;
    void drain() override;
    infer::EngineStats stats() override;
    std::string extra_metrics() override;

    const model::Model& model() const override { return *model_; }
    const tokenizer::Tokenizer& tokenizer() const override { return tok_; }
    int n_ctx() const override { return cfg_.n_ctx; }
    int threads() const override { return cfg_.threads; }
    const std::vector<infer::NamedLora>& loras() const override { return no_loras_; }

private:
    struct Job;
    struct Slot;
    void worker(Slot& slot);
    struct Run;
    std::string why_refused(const std::vector<int32_t>& prompt,
                            const infer::GenerationParams& params) const;
    void run(Slot& slot, Job& job);
    void speculative(Slot& slot, Run& r);
    void cascade(Slot& slot, Run& r);
    void split(Slot& slot, Run& r);
    void cloud_finishes(Slot& slot, Run& r);  // --defer request
    void alone(Slot& slot, Run& r);           // the rest from the edge's model (a fallback)
    std::vector<float> logits_of(model::Context& ctx, std::span<const int32_t> tokens);
    std::vector<float> residual_of(model::Context& ctx, std::span<const int32_t> tokens);
    void record_token(Job& job);

    std::shared_ptr<const model::Model> model_;
    tokenizer::Tokenizer tok_;
    EdgeConfig cfg_;
    std::vector<infer::NamedLora> no_loras_;
    infer::ContextBatcher batcher_;  // the slots' cascade and split rows, one pass for all waiting

    std::mutex mu_;
    std::condition_variable cv_, idle_cv_;
    std::deque<std::unique_ptr<Job>> waiting_;
    std::vector<Job*> running_;
    bool accepting_ = true, stop_ = false;
    int64_t next_id_ = 1;
    infer::EngineStats stats_;
    infer::SpeculativeStats spec_;
    int64_t fallbacks_ = 0;
    int64_t deferred_ = 0, edge_tokens_ = 0, requests_deferred_ = 0;  // cascade
    int64_t split_tokens_ = 0;                                        // split: rows sent
    double split_cloud_seconds_ = 0;               // the cloud's own compute time in split calls
    std::deque<std::pair<double, int64_t>> rate_;  // (time, generated total), the last seconds
    std::vector<std::unique_ptr<Slot>> slots_;
    std::vector<std::thread> threads_;
};

}  // namespace syslm::serve
