#include "serve/completions.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>

namespace syslm::serve {

using nlohmann::json;

namespace {

// How often a waiting handler looks whether its client is still there.
constexpr auto kClientCheck = std::chrono::milliseconds(200);

std::string random_id(const char* prefix) {
    static std::mt19937_64 rng{std::random_device{}()};
    static std::mutex mu;
    std::lock_guard lk(mu);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
    return buf;
}

// One choice's events so far.
struct Choice {
    std::string text;
    std::vector<infer::Event> tokens;  // for logprobs
    infer::FinishReason finish = infer::FinishReason::Stop;
    infer::Refusal error;
    int64_t n_prompt = 0, n_generated = 0;
    bool done = false;
};

// One HTTP request's choices, filled by the engine thread, drained by the handler.
struct Generation {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<int, infer::Event>> events;  // (choice, event), when streaming
    std::vector<Choice> choices;
    std::vector<int64_t> ids;
    std::atomic<bool> cancelled{false};
    bool stream = false;
    int done = 0;  // choices finished

    bool all_done() const { return done == static_cast<int>(choices.size()); }
};

// The engine's callback for one choice. It owns a reference: the engine may still call it after
// the handler has let go (a client that disconnected), until the cancellation lands.
infer::Engine::Callback callback(std::shared_ptr<Generation> g, int index) {
    return [g = std::move(g), index](const infer::Event& e) {
        std::lock_guard lk(g->mu);
        Choice& c = g->choices[static_cast<size_t>(index)];
        c.text += e.text;
        if (e.token >= 0) c.tokens.push_back(e);
        if (e.done) {
            c.done = true;
            c.finish = e.finish_reason;
            c.error = e.error;
            c.n_prompt = e.n_prompt;
            c.n_generated = e.n_generated;
            ++g->done;
        }
        if (g->stream) g->events.emplace_back(index, e);
        g->cv.notify_all();
        return !g->cancelled.load();
    };
}

void cancel(Generation& g, infer::Engine& engine) {
    g.cancelled = true;
    for (int64_t id : g.ids) engine.cancel(id);
}

// The answer to a request the engine refused or ended in an error: each kind its HTTP status.
ApiError api_error(const infer::Refusal& r) {
    switch (r.kind) {
        case infer::Failure::QueueFull:
            return {429, "rate_limit_exceeded",
                    "The server is busy (request queue full); retry later", "", ""};
        case infer::Failure::ShuttingDown:
            return {503, "server_error", "The server is shutting down", "", ""};
        case infer::Failure::InvalidRequest:
        case infer::Failure::KvPoolTooSmall:
            return {400, "invalid_request_error", r.message, "", ""};
        case infer::Failure::None:
        case infer::Failure::StepFailed:
            break;
    }
    return {500, "server_error", r.message, "", ""};
}

// Every choice submitted, or none (an ApiError says why).
std::shared_ptr<Generation> submit(infer::Engine& engine, const ParsedRequest& pr) {
    auto g = std::make_shared<Generation>();
    g->stream = pr.stream;
    const size_t n_choices = pr.prompts.size() * static_cast<size_t>(pr.n);
    g->choices.resize(n_choices);
    for (size_t i = 0; i < n_choices; ++i) {
        infer::GenerationParams params = pr.params;
        params.sampling.seed += i;  // n choices: different draws
        int64_t id = 0;
        infer::Refusal refused;
        if (!engine.submit(pr.prompts[i / static_cast<size_t>(pr.n)], params,
                           callback(g, static_cast<int>(i)), &id, &refused)) {
            cancel(*g, engine);
            throw api_error(refused);
        }
        g->ids.push_back(id);
    }
    return g;
}

json usage(const std::vector<Choice>& choices, size_t n_per_prompt) {
    int64_t prompt = 0, completion = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
        if (i % n_per_prompt == 0) prompt += choices[i].n_prompt;
        completion += choices[i].n_generated;
    }
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion}};
}

json completion_logprobs(const Choice& c, const tokenizer::Tokenizer& tok, size_t offset0) {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    size_t off = offset0;
    for (const infer::Event& e : c.tokens) {
        const std::string& piece = tok.token_to_piece(e.token);
        tokens.push_back(piece);
        lps.push_back(e.logprob);
        json top = json::object();
        for (const auto& t : e.top) top[tok.token_to_piece(t.token)] = t.logprob;
        tops.push_back(top);
        offs.push_back(off);
        off += piece.size();
    }
    return {
        {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

// What every response object of one request carries.
struct Envelope {
    std::string id, model;
    int64_t created;
    bool chat;
};

http::Response json_response(int status, const json& body) {
    return {status, "application/json", dump(body), {}};
}

// The whole answer, once every choice is done (under g.mu). A choice that ended in an error
// makes the answer that error (api_error: 400 when the KV pool could not hold the request).
std::pair<int, json> whole_answer(const Generation& g, const ParsedRequest& pr, const Envelope& env,
                                  const tokenizer::Tokenizer& tok) {
    const size_t n = static_cast<size_t>(pr.n);
    json choices = json::array();
    for (size_t i = 0; i < g.choices.size(); ++i) {
        const Choice& c = g.choices[i];
        if (c.finish == infer::FinishReason::Error) {
            const ApiError e = api_error(c.error);
            return {e.status, error_body(e)};
        }
        json lp = nullptr;
        if (pr.params.logprobs >= 0) {
            if (env.chat) {
                lp = {{"content", json::array()}};
                for (const auto& e : c.tokens) lp["content"].push_back(chat_logprob(e, tok));
            } else {
                lp = completion_logprobs(c, tok, pr.echo ? pr.prompt_texts[i / n].size() : 0);
            }
        }
        if (env.chat)
            choices.push_back({{"index", i},
                               {"message", {{"role", "assistant"}, {"content", c.text}}},
                               {"logprobs", lp},
                               {"finish_reason", finish_reason_name(c.finish)}});
        else
            choices.push_back({{"index", i},
                               {"text", (pr.echo ? pr.prompt_texts[i / n] : "") + c.text},
                               {"logprobs", lp},
                               {"finish_reason", finish_reason_name(c.finish)}});
    }
    return {200,
            {{"id", env.id},
             {"object", env.chat ? "chat.completion" : "text_completion"},
             {"created", env.created},
             {"model", env.model},
             {"choices", choices},
             {"usage", usage(g.choices, n)}}};
}

// Waits for every choice (or for the client to go away, which cancels them), then replies.
void answer_whole(Generation& g, const ParsedRequest& pr, const Envelope& env,
                  infer::Engine& engine, http::Responder& res) {
    std::unique_lock lk(g.mu);
    while (!g.cv.wait_for(lk, kClientCheck, [&] { return g.all_done(); }))
        if (res.client_gone()) {
            lk.unlock();
            cancel(g, engine);
            return;
        }
    const auto [status, body] = whole_answer(g, pr, env, engine.tokenizer());
    lk.unlock();
    res.reply(json_response(status, body));
}

// The SSE chunks of one request: `chat.completion.chunk` (a role chunk first per choice) or
// `text_completion` objects, one per event, an error object for a choice that failed.
class SseWriter {
public:
    SseWriter(const Envelope& env, size_t n_choices, int logprobs, const tokenizer::Tokenizer& tok)
        : env_(env), logprobs_(logprobs), tok_(tok), started_(n_choices, false) {}

    std::string event(int index, const infer::Event& e) {
        std::string out;
        if (env_.chat && !started_[static_cast<size_t>(index)]) {
            started_[static_cast<size_t>(index)] = true;
            out += chunk({{"index", index},
                          {"delta", {{"role", "assistant"}, {"content", ""}}},
                          {"logprobs", nullptr},
                          {"finish_reason", nullptr}});
        }
        if (e.done && e.finish_reason == infer::FinishReason::Error)
            out += data(error_body(api_error(e.error)));
        if (!e.text.empty() || (e.token >= 0 && logprobs_ >= 0)) {
            json lp = nullptr;
            if (logprobs_ >= 0 && e.token >= 0)
                lp = env_.chat ? json{{"content", json::array({chat_logprob(e, tok_)})}}
                               : json{{"tokens", {tok_.token_to_piece(e.token)}},
                                      {"token_logprobs", {e.logprob}}};
            out += piece(index, e.text, lp, nullptr);
        }
        if (e.done && e.finish_reason != infer::FinishReason::Error)
            out += piece(index, "", nullptr, finish_reason_name(e.finish_reason));
        return out;
    }

    // After the last event: the usage object when asked for, then [DONE].
    std::string end(const json* usage) const {
        std::string out;
        if (usage)
            out += data({{"id", env_.id},
                         {"object", env_.chat ? "chat.completion.chunk" : "text_completion"},
                         {"created", env_.created},
                         {"model", env_.model},
                         {"choices", json::array()},
                         {"usage", *usage}});
        return out + "data: [DONE]\n\n";
    }

private:
    static std::string data(const json& j) { return "data: " + dump(j) + "\n\n"; }

    std::string chunk(json choice) const {
        return data({{"id", env_.id},
                     {"object", env_.chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", env_.created},
                     {"model", env_.model},
                     {"choices", json::array({std::move(choice)})}});
    }

    // A text piece (content delta / text) or, with `finish`, a choice's last chunk.
    std::string piece(int index, const std::string& text, json lp, json finish) const {
        if (env_.chat)
            return chunk({{"index", index},
                          {"delta", finish.is_null() ? json{{"content", text}} : json::object()},
                          {"logprobs", lp},
                          {"finish_reason", finish}});
        return chunk(
            {{"index", index}, {"text", text}, {"logprobs", lp}, {"finish_reason", finish}});
    }

    const Envelope& env_;
    int logprobs_;
    const tokenizer::Tokenizer& tok_;
    std::vector<bool> started_;
};

// Streams the events as they come. Writes happen outside g.mu: a slow client holds back its
// own handler, never the engine thread (whose callbacks take g.mu).
void stream_sse(Generation& g, const ParsedRequest& pr, const Envelope& env, infer::Engine& engine,
                http::Responder& res) {
    res.start_stream({200, "text/event-stream", "", {{"Cache-Control", "no-cache"}}});
    SseWriter sse(env, g.choices.size(), pr.params.logprobs, engine.tokenizer());
    std::unique_lock lk(g.mu);
    while (true) {
        g.cv.wait_for(lk, kClientCheck, [&] { return !g.events.empty(); });
        if (res.client_gone()) break;
        std::string out;
        while (!g.events.empty()) {
            auto [index, e] = std::move(g.events.front());
            g.events.pop_front();
            out += sse.event(index, e);
        }
        const bool finished = g.all_done();  // and every event taken: they come under g.mu
        if (finished) {
            const json u = usage(g.choices, static_cast<size_t>(pr.n));
            out += sse.end(pr.include_usage ? &u : nullptr);
        }
        lk.unlock();
        if (!out.empty() && !res.write(out)) break;
        if (finished) {
            res.end();
            return;
        }
        lk.lock();
    }
    if (lk.owns_lock()) lk.unlock();
    cancel(g, engine);  // the client is gone
}

}  // namespace

void serve_completion(const CompletionContext& ctx, const json& body, bool chat,
                      http::Responder& res) {
    infer::Engine& engine = *ctx.engine;
    const ParsedRequest pr = chat ? parse_chat(body, ctx.model_name, engine, ctx.format, ctx.limits)
                                  : parse_completion(body, ctx.model_name, engine, ctx.limits);
    const std::shared_ptr<Generation> g = submit(engine, pr);
    const Envelope env{random_id(chat ? "chatcmpl-" : "cmpl-"), ctx.model_name, unix_time(), chat};
    try {
        if (pr.stream)
            stream_sse(*g, pr, env, engine, res);
        else
            answer_whole(*g, pr, env, engine, res);
    } catch (...) {
        cancel(*g, engine);  // nothing will read the rest
        throw;
    }
}

}  // namespace syslm::serve
