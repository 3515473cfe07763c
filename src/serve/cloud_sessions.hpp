// The cloud's half of an edge's work (`serve --role cloud`; docs/design/edge_cloud.md): a session
// per edge request holds the cloud model's context for it and its sampler. The edge opens one
// with the prompt, then each call sends the tokens the edge decided itself since the last one (a
// cascade's confident tokens) and drafts with the distributions it drew them from (speculative
// decoding); the session takes both in one forward pass, verifies the drafts (infer::LocalTarget:
// the usual acceptance rule) and answers the kept drafts and its own next token. A split
// session (opened with split_at L) instead takes the residual rows entering layer L, runs layers
// [L, n) and the head, and answers the next token. Calls of different sessions that wait at the
// same time run in one forward pass (model/ContextBatch: the weights read once for all of them),
// each row computed as its session would alone. Sessions are
// bounded in number, end on close or after an idle timeout, and check the position each call
// expects, so the two sides can never drift apart.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "infer/context_batcher.hpp"
#include "model/transformer.hpp"

namespace syslm::serve {

struct CloudSessionsConfig {
    int max_sessions = 16;
    int n_ctx = 4096;   // the most positions one session may ask for
    int threads = 1;    // of each session's forward passes
    int split_at = -1;  // split sessions must split here (serve --split-at); -1: where they ask
    double idle_timeout_s = 60;
};

struct CloudSessionStats {
    int open = 0;
    int64_t opened = 0, expired = 0;
    int64_t prompt_tokens = 0;
    int64_t verify_calls = 0;  // = the target's forward passes after the prompts
    int64_t split_calls = 0, split_rows = 0;
    int64_t batches = 0, batched_calls = 0;  // the batcher's passes and the calls they ran
    int64_t context_tokens = 0;              // an edge's own tokens sent with its calls (cascade)
    int64_t drafted = 0, accepted = 0, generated = 0;
    double forward_seconds = 0;  // prompts and verify calls, summed over sessions
};

class CloudSessions {
public:
    CloudSessions(std::shared_ptr<const model::Model> model, const CloudSessionsConfig& cfg);
    ~CloudSessions();

    // The handlers of POST /v1/syslm/session, /verify and /close: a request body in, the answer
    // out. Throw serve::ApiError: 400 (a bad field), 404 (no such session: closed or expired),
    // 409 (the call expects another position), 429 (every session is taken).
    nlohmann::ordered_json open(const nlohmann::ordered_json& body);
    nlohmann::ordered_json verify(const nlohmann::ordered_json& body);
    nlohmann::ordered_json close(const nlohmann::ordered_json& body);
    // POST /v1/syslm/split: a JSON header line {session, n_past, tokens, wire, sample}, then the
    // rows (the residual stream entering the session's split layer, one per token, in `wire`'s
    // format). Runs this side's layers and the head over them; answers the next token sampled
    // from the last row (unless sample is false: a prompt's earlier chunks).
    nlohmann::ordered_json split(std::string_view body);

    CloudSessionStats stats() const;
    std::string prometheus_text() const;

private:
    struct Session;
    std::vector<float> forward(model::Context& ctx, std::span<const int32_t> tokens,
                               std::span<const float> residual, int first_layer, bool all_logits);
    using Clock = std::chrono::steady_clock;
    std::shared_ptr<Session> find(const nlohmann::ordered_json& body);
    void expire_idle();  // under mu_

    std::shared_ptr<const model::Model> model_;
    CloudSessionsConfig cfg_;
    mutable std::mutex mu_;
    std::map<std::string, std::shared_ptr<Session>> sessions_;
    uint64_t next_ = 1;
    CloudSessionStats stats_;

    infer::ContextBatcher batcher_;  // every waiting session's call in one pass
};

}  // namespace syslm::serve
