#include "serve/cloud_sessions.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "infer/sampler.hpp"
#include "infer/speculative.hpp"
#include "infer/wire_rows.hpp"
#include "serve/metrics.hpp"
#include "serve/openai_api.hpp"

namespace syslm::serve {

using json = nlohmann::ordered_json;

struct CloudSessions::Session {
    std::mutex mu;  // one call at a time per session
    std::unique_ptr<model::Context> ctx;
    std::unique_ptr<infer::Sampler> sampler;
    std::unique_ptr<infer::LocalTarget> target;  // speculative and cascade sessions
    int split_at = -1;                           // split sessions: the first layer this side runs
    Clock::time_point last_use;
    bool closed = false;
};

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
    throw ApiError{400, "invalid_request_error", message, param, ""};
}

const json& required(const json& body, const char* key) {
    if (!body.is_object()) bad("", "the body must be a JSON object");
    const auto it = body.find(key);
    if (it == body.end()) bad(key, std::string("'") + key + "' is required");
    return *it;
}

std::vector<int32_t> token_ids(const json& body, const char* key, int n_vocab) {
    const json& a = required(body, key);
    if (!a.is_array()) bad(key, std::string("'") + key + "' must be an array of token ids");
    std::vector<int32_t> ids;
    ids.reserve(a.size());
    for (const json& t : a) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
            bad(key, std::string("'") + key + "' holds a value that is not a token id in [0, " +
                         std::to_string(n_vocab) + ")");
        ids.push_back(t.get<int32_t>());
    }
    return ids;
}

infer::SamplingParams sampling(const json& body) {
    infer::SamplingParams s;
    const json* j = &body;
    if (body.contains("sampling")) j = &body["sampling"];
    if (!j->is_object()) bad("sampling", "'sampling' must be an object");
    s.temperature = static_cast<float>(number_field(*j, "temperature", s.temperature, 0, 100));
    s.top_k = static_cast<int>(integer_field(*j, "top_k", s.top_k, 0, 1 << 30));
    s.top_p = static_cast<float>(number_field(*j, "top_p", s.top_p, 0, 1));
    s.min_p = static_cast<float>(number_field(*j, "min_p", s.min_p, 0, 1));
    s.repeat_penalty = static_cast<float>(number_field(*j, "repeat_penalty", 1, 0, 10));
    s.repeat_last_n =
        static_cast<int>(integer_field(*j, "repeat_last_n", s.repeat_last_n, 0, 1 << 20));
    s.presence_penalty = static_cast<float>(number_field(*j, "presence_penalty", 0, -2, 2));
    s.frequency_penalty = static_cast<float>(number_field(*j, "frequency_penalty", 0, -2, 2));
    s.seed = static_cast<uint64_t>(integer_field(*j, "seed", 0, 0, INT64_MAX));
    return s;
}

// Each draft's distribution: [[id, p], ...], ids in the vocabulary, p in (0, 1].
std::vector<std::vector<infer::TokenProb>> draft_dists(const json& body, size_t n, int n_vocab) {
    const json& q = required(body, "q");
    if (!q.is_array() || q.size() != n)
        bad("q", "'q' must hold one distribution per draft (" + std::to_string(n) + ")");
    std::vector<std::vector<infer::TokenProb>> out(n);
    for (size_t i = 0; i < n; ++i) {
        if (!q[i].is_array() || q[i].empty()) bad("q", "each of 'q' must be a non-empty array");
        for (const json& pair : q[i]) {
            if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() ||
                !pair[1].is_number())
                bad("q", "each entry of 'q' must be [token id, probability]");
            const int64_t id = pair[0].get<int64_t>();
            const double p = pair[1].get<double>();
            if (id < 0 || id >= n_vocab || !(p > 0 && p <= 1))
                bad("q",
                    "an entry of 'q' has a token id outside the vocabulary or a probability "
                    "outside (0, 1]");
            out[i].push_back({static_cast<int32_t>(id), static_cast<float>(p)});
        }
    }
    return out;
}

std::string new_session_id(uint64_t n) {
    static std::mt19937_64 rng{std::random_device{}()};
    char buf[48];
    std::snprintf(buf, sizeof buf, "s%llu-%016llx", static_cast<unsigned long long>(n),
                  static_cast<unsigned long long>(rng()));
    return buf;
}

}  // namespace

CloudSessions::CloudSessions(std::shared_ptr<const model::Model> model,
                             const CloudSessionsConfig& cfg)
    : model_(std::move(model)), cfg_(cfg), batcher_(*model_, cfg.threads) {}

CloudSessions::~CloudSessions() = default;

// A call's rows through its session's context, batched with the other sessions' waiting calls.
std::vector<float> CloudSessions::forward(model::Context& ctx, std::span<const int32_t> tokens,
                                          std::span<const float> residual, int first_layer,
                                          bool all_logits) {
    model::ContextBatch::Item it;
    it.ctx = &ctx;
    it.tokens = tokens;
    it.residual = residual;
    it.first_layer = first_layer;
    it.all_logits = all_logits;
    return batcher_.run(it);
}

void CloudSessions::expire_idle() {
    const auto now = Clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
        const std::shared_ptr<Session>& s = it->second;
        std::unique_lock lk(s->mu, std::try_to_lock);  // a session in a call is not idle
        if (lk.owns_lock() &&
            std::chrono::duration<double>(now - s->last_use).count() > cfg_.idle_timeout_s) {
            s->closed = true;
            ++stats_.expired;
            it = sessions_.erase(it);
        } else {
            ++it;
        }
    }
}

json CloudSessions::open(const json& body) {
    const int V = model_->hparams().n_vocab;
    const int64_t edge_vocab = integer_field(body, "n_vocab", V, 1, INT32_MAX);
    if (edge_vocab != V)
        bad("n_vocab", "the edge's vocabulary has " + std::to_string(edge_vocab) +
                           " tokens; this cloud's model has " + std::to_string(V));
    const int L = model_->hparams().n_layer;
    const int split_at = static_cast<int>(integer_field(body, "split_at", -1, 0, L));
    if (split_at >= 0 && cfg_.split_at >= 0 && split_at != cfg_.split_at)
        bad("split_at", "this cloud runs its model from layer " + std::to_string(cfg_.split_at) +
                            " (serve --split-at); the edge asks for " + std::to_string(split_at));
    // A split session's rows come with its calls; the others start from their prompt.
    const std::vector<int32_t> prompt =
        split_at >= 0 ? std::vector<int32_t>{} : token_ids(body, "prompt", V);
    if (split_at >= 0 && body.contains("prompt"))
        bad("prompt", "a split session takes its prompt as rows (/v1/syslm/split)");
    if (split_at < 0 && prompt.empty()) bad("prompt", "'prompt' must hold at least one token");
    const int n_ctx = static_cast<int>(integer_field(body, "n_ctx", cfg_.n_ctx, 2, cfg_.n_ctx));
    if (static_cast<int>(prompt.size()) >= n_ctx)
        bad("prompt", "the prompt has " + std::to_string(prompt.size()) +
                          " tokens; the session's context holds " + std::to_string(n_ctx));
    auto s = std::make_shared<Session>();
    try {
        s->sampler = std::make_unique<infer::Sampler>(sampling(body));
    } catch (const Error& e) {
        bad("sampling", e.what());
    }
    std::string id;
    std::unique_lock sl(s->mu);  // before it is findable: no call runs on it before its prompt
    {
        std::lock_guard lk(mu_);
        expire_idle();
        if (static_cast<int>(sessions_.size()) >= cfg_.max_sessions)
            throw ApiError{
                429, "rate_limit_exceeded",
                "every session of this cloud is taken (" + std::to_string(cfg_.max_sessions) + ")",
                "", ""};
        id = new_session_id(next_++);
        s->last_use = Clock::now();
        sessions_.emplace(id, s);  // its slot is held while the prompt runs
        ++stats_.opened;
    }
    const auto t0 = Clock::now();
    try {
        s->ctx = std::make_unique<model::Context>(*model_, n_ctx, cfg_.threads);
        s->split_at = split_at;
        if (split_at < 0) {
            s->target = std::make_unique<infer::LocalTarget>(*s->ctx, *s->sampler);
            s->target->start(prompt);
        }
        s->last_use = Clock::now();
    } catch (const std::exception& e) {
        s->closed = true;
        sl.unlock();
        std::lock_guard lk(mu_);
        sessions_.erase(id);
        throw ApiError{500, "server_error", std::string("the session's prompt failed: ") + e.what(),
                       "", ""};
    }
    const int n_past = s->ctx->n_past();
    sl.unlock();
    std::lock_guard lk(mu_);
    stats_.prompt_tokens += static_cast<int64_t>(prompt.size());
    stats_.forward_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    return {{"session", id}, {"n_past", n_past}, {"n_ctx", n_ctx}};
}

std::shared_ptr<CloudSessions::Session> CloudSessions::find(const json& body) {
    const json& id = required(body, "session");
    if (!id.is_string()) bad("session", "'session' must be a string");
    std::lock_guard lk(mu_);
    const auto it = sessions_.find(id.get<std::string>());
    if (it == sessions_.end())
        throw ApiError{404, "invalid_request_error",
                       "no session '" + id.get<std::string>() + "' (closed, or idle for over " +
                           std::to_string(static_cast<int>(cfg_.idle_timeout_s)) + " s)",
                       "session", "session_not_found"};
    return it->second;
}

namespace {

// A split call's header line and rows, checked.
struct SplitCall {
    json head;
    std::vector<int32_t> tokens;
    std::vector<float> rows;
    int64_t n_past = -1;
    bool sample = true;
};

SplitCall read_split(std::string_view body, int V, int64_t E) {
    const size_t nl = body.find('\n');
    if (nl == std::string_view::npos)
        bad("", "a split call is a JSON header line, then the rows (no newline found)");
    SplitCall c;
    try {
        c.head = json::parse(body.substr(0, nl));
    } catch (const json::exception& e) {
        bad("", std::string("the split call's header line is not JSON: ") + e.what());
    }
    c.tokens = token_ids(c.head, "tokens", V);
    if (c.tokens.empty() || c.tokens.size() > 512)
        bad("tokens", "a split call carries 1 to 512 rows, one per token");
    const auto& wire = required(c.head, "wire");
    if (!wire.is_string()) bad("wire", "'wire' must be f16, int8 or f32");
    c.rows.resize(c.tokens.size() * static_cast<size_t>(E));
    try {
        infer::decode_rows(infer::wire_type(wire.get<std::string>()), body.substr(nl + 1),
                           static_cast<int64_t>(c.tokens.size()), E, c.rows.data());
    } catch (const Error& e) {
        bad("rows", e.what());
    }
    c.n_past = integer_field(c.head, "n_past", -1, 0, INT32_MAX);
    if (c.head.contains("sample")) {
        if (!c.head["sample"].is_boolean()) bad("sample", "'sample' must be a boolean");
        c.sample = c.head["sample"].get<bool>();
    }
    return c;
}

// The call is for the position the session is at, and the session is still open.
void check_position(bool closed, int n_past, int64_t expect) {
    if (closed)
        throw ApiError{404, "invalid_request_error", "the session was closed", "session", ""};
    if (expect != n_past)
        throw ApiError{409, "invalid_request_error",
                       "the call expects position " + std::to_string(expect) +
                           "; the session is at " + std::to_string(n_past),
                       "n_past", "position_mismatch"};
}

}  // namespace

json CloudSessions::verify(const json& body) {
    const int V = model_->hparams().n_vocab;
    const std::shared_ptr<Session> s = find(body);
    const std::vector<int32_t> context =
        body.contains("tokens") ? token_ids(body, "tokens", V) : std::vector<int32_t>{};
    const std::vector<int32_t> drafts = token_ids(body, "drafts", V);
    const auto q = draft_dists(body, drafts.size(), V);
    const int64_t expect = integer_field(body, "n_past", -1, 0, INT32_MAX);
    std::lock_guard sl(s->mu);
    const int n_past = s->ctx->n_past();
    check_position(s->closed, n_past, expect);
    if (!s->target) bad("session", "a split session takes rows (/v1/syslm/split), not drafts");
    const int rollback = s->ctx->kv_cache().max_rollback();
    const int m = static_cast<int>(context.size());
    if (n_past + 1 + m + static_cast<int>(drafts.size()) > s->ctx->n_ctx() ||
        static_cast<int>(drafts.size()) + 1 > rollback)
        bad("drafts", std::to_string(m) + " tokens and " + std::to_string(drafts.size()) +
                          " drafts do not fit: the session is at " + std::to_string(n_past) +
                          " of " + std::to_string(s->ctx->n_ctx()) +
                          " positions and can take back " + std::to_string(rollback - 1));
    const auto t0 = Clock::now();
    std::vector<int32_t> emitted;
    const std::vector<int32_t>& call = s->target->call_rows(context, drafts);
    const std::vector<float> logits = forward(*s->ctx, call, {}, 0, true);
    const int a = s->target->take(logits, m, drafts, q, emitted);
    s->last_use = Clock::now();
    {
        std::lock_guard lk(mu_);
        ++stats_.verify_calls;
        stats_.drafted += static_cast<int64_t>(drafts.size());
        stats_.context_tokens += m;
        stats_.accepted += a;
        stats_.generated += static_cast<int64_t>(emitted.size());
        stats_.forward_seconds += std::chrono::duration<double>(s->last_use - t0).count();
    }
    return {{"accepted", a}, {"tokens", emitted}, {"n_past", s->ctx->n_past()}};
}

json CloudSessions::split(std::string_view body) {
    const int V = model_->hparams().n_vocab;
    const SplitCall c = read_split(body, V, model_->hparams().n_embd);
    const std::shared_ptr<Session> s = find(c.head);
    const std::vector<int32_t>& tokens = c.tokens;
    std::lock_guard sl(s->mu);
    const int n_past = s->ctx->n_past();
    check_position(s->closed, n_past, c.n_past);
    if (s->split_at < 0) bad("session", "not a split session (open it with split_at)");
    if (n_past + static_cast<int>(tokens.size()) > s->ctx->n_ctx())
        bad("tokens", std::to_string(tokens.size()) + " rows do not fit: the session is at " +
                          std::to_string(n_past) + " of " + std::to_string(s->ctx->n_ctx()));
    const auto t0 = Clock::now();
    const std::vector<float> logits = forward(*s->ctx, {}, c.rows, s->split_at, false);
    for (int32_t t : tokens) s->sampler->accept(t);  // the history penalties look at
    json answer = {{"n_past", s->ctx->n_past()}};
    if (c.sample) answer["token"] = s->sampler->sample(std::span<const float>(logits).last(V));
    s->last_use = Clock::now();
    const double seconds = std::chrono::duration<double>(s->last_use - t0).count();
    answer["seconds"] = seconds;
    std::lock_guard lk(mu_);
    ++stats_.split_calls;
    stats_.split_rows += static_cast<int64_t>(tokens.size());
    stats_.forward_seconds += seconds;
    return answer;
}

json CloudSessions::close(const json& body) {
    const std::shared_ptr<Session> s = find(body);
    {
        std::lock_guard sl(s->mu);
        s->closed = true;
    }
    std::lock_guard lk(mu_);
    sessions_.erase(body["session"].get<std::string>());
    return {{"closed", true}};
}

CloudSessionStats CloudSessions::stats() const {
    CloudSessionStats s;
    {
        std::lock_guard lk(mu_);
        s = stats_;
        s.open = static_cast<int>(sessions_.size());
    }
    const infer::BatcherStats b = batcher_.stats();
    s.batches = b.passes;
    s.batched_calls = b.calls;
    return s;
}

std::string CloudSessions::prometheus_text() const {
    const CloudSessionStats s = stats();
    std::ostringstream o;
    prometheus_metric(o, "cloud_sessions_open", "gauge", "Edge sessions open", s.open);
    prometheus_metric(o, "cloud_sessions_total", "counter", "Edge sessions opened",
                      static_cast<double>(s.opened));
    prometheus_metric(o, "cloud_sessions_expired_total", "counter",
                      "Sessions ended by the idle timeout", static_cast<double>(s.expired));
    prometheus_metric(o, "cloud_prompt_tokens_total", "counter", "Prompt tokens of edge sessions",
                      static_cast<double>(s.prompt_tokens));
    prometheus_metric(o, "cloud_verify_calls_total", "counter",
                      "Verify calls (the target's forward passes after the prompts)",
                      static_cast<double>(s.verify_calls));
    prometheus_metric(o, "cloud_batches_total", "counter",
                      "Forward passes the batcher ran over edges' calls",
                      static_cast<double>(s.batches));
    prometheus_metric(o, "cloud_batched_calls_total", "counter",
                      "Edges' calls run by the batcher (divided by its passes: calls per pass)",
                      static_cast<double>(s.batched_calls));
    prometheus_metric(o, "cloud_split_calls_total", "counter",
                      "Split calls (the cloud's layers over an edge's rows)",
                      static_cast<double>(s.split_calls));
    prometheus_metric(o, "cloud_split_rows_total", "counter", "Rows received from split edges",
                      static_cast<double>(s.split_rows));
    prometheus_metric(o, "cloud_context_tokens_total", "counter",
                      "Tokens an edge decided itself, sent with its calls (cascade)",
                      static_cast<double>(s.context_tokens));
    prometheus_metric(o, "cloud_drafted_tokens_total", "counter", "Draft tokens received",
                      static_cast<double>(s.drafted));
    prometheus_metric(o, "cloud_accepted_tokens_total", "counter", "Draft tokens kept",
                      static_cast<double>(s.accepted));
    prometheus_metric(o, "cloud_generated_tokens_total", "counter",
                      "Tokens answered to edges (kept drafts and the target's own)",
                      static_cast<double>(s.generated));
    prometheus_metric(o, "cloud_forward_seconds_total", "counter", "Forward time of edge sessions",
                      s.forward_seconds);
    return o.str();
}

}  // namespace syslm::serve
