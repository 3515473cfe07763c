#include "serve/completions.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>

#include "serve/openai_response.hpp"

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

// One HTTP request's choices, filled by the engine thread, drained by the handler.
struct Generation {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<int, infer::Event>> events;  // (choice, event), when streaming
    std::vector<ChoiceResult> choices;
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
        ChoiceResult& c = g->choices[static_cast<size_t>(index)];
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

http::Response json_response(int status, const json& body) {
    return {status, "application/json", dump(body), {}};
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
    const auto [status, body] = whole_response(g.choices, pr, env, engine.tokenizer());
    lk.unlock();
    res.reply(json_response(status, body));
}

// Streams the events as they come. Writes happen outside g.mu: a slow client holds back its
// own handler, never the engine thread (whose callbacks take g.mu).
void stream_sse(Generation& g, const ParsedRequest& pr, const Envelope& env, infer::Engine& engine,
                http::Responder& res) {
    res.start_stream({200, "text/event-stream", "", {{"Cache-Control", "no-cache"}}});
    SseChunks sse(env, g.choices.size(), pr.params.logprobs, engine.tokenizer());
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
