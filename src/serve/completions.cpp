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

using json = nlohmann::ordered_json;

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
infer::Generator::Callback callback(std::shared_ptr<Generation> g, int index) {
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
            c.fallback = e.fallback;
            ++g->done;
        }
        if (g->stream) g->events.emplace_back(index, e);
        g->cv.notify_all();
        return !g->cancelled.load();
    };
}

void cancel(Generation& g, infer::Generator& engine) {
    g.cancelled = true;
    for (int64_t id : g.ids) engine.cancel(id);
}

// Every choice submitted, or none (an ApiError says why).
std::shared_ptr<Generation> submit(infer::Generator& engine, const ParsedRequest& pr) {
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
                  infer::Generator& engine, http::Responder& res) {
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
void stream_sse(Generation& g, const ParsedRequest& pr, const Envelope& env, infer::Generator& engine,
                http::Responder& res) {
    res.start_stream({200, "text/event-stream", "", {{"Cache-Control", "no-cache"}}});
    SseChunks sse(env, g.choices.size(), pr.params.logprobs, engine.tokenizer(), &pr.tools);
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

// /v1/responses' request as a chat completion's: instructions become a system message, input a
// user message (a string) or the messages themselves (content a string, or parts of input_text).
json responses_as_chat(const json& body) {
    if (!body.is_object())
        throw ApiError{400, "invalid_request_error", "the request body must be a JSON object", "",
                       ""};
    json chat = json::object();
    for (const char* k : {"model", "temperature", "top_p", "stream", "seed", "stop"})
        if (body.contains(k)) chat[k] = body[k];
    if (body.contains("max_output_tokens")) chat["max_tokens"] = body["max_output_tokens"];
    json messages = json::array();
    if (body.contains("instructions") && body["instructions"].is_string())
        messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
    const json input = body.value("input", json());
    if (input.is_string()) {
        messages.push_back({{"role", "user"}, {"content", input}});
    } else if (input.is_array() && !input.empty()) {
        for (const json& m : input) {
            if (!m.is_object() || !m.contains("role") || !m.contains("content"))
                throw ApiError{400, "invalid_request_error",
                               "each input item must be a message with a role and content", "input",
                               ""};
            json content = m["content"];
            if (content.is_array()) {  // [{"type": "input_text", "text": ...}, ...]
                std::string text;
                for (const json& part : content) {
                    if (!part.is_object() || !part.contains("text") || !part["text"].is_string())
                        throw ApiError{400, "invalid_request_error",
                                       "only text content parts are supported", "input", ""};
                    text += part["text"].get<std::string>();
                }
                content = text;
            }
            messages.push_back({{"role", m["role"]}, {"content", content}});
        }
    } else {
        throw ApiError{400, "invalid_request_error",
                       "'input' must be a string or a non-empty list of messages", "input", ""};
    }
    chat["messages"] = messages;
    return chat;
}

// The response object of /v1/responses, as its status stands.
json response_object(const Envelope& env, const std::string& msg_id, const ChoiceResult& c,
                     const char* status) {
    json content = json::array();
    if (std::string(status) != "in_progress")
        content.push_back(
            {{"type", "output_text"}, {"text", c.text}, {"annotations", json::array()}});
    json output = json::array();
    if (std::string(status) != "in_progress")
        output.push_back({{"type", "message"},
                          {"id", msg_id},
                          {"status", "completed"},
                          {"role", "assistant"},
                          {"content", content}});
    json r = {{"id", env.id},     {"object", "response"},         {"created_at", env.created},
              {"status", status}, {"model", env.model},           {"output", output},
              {"error", nullptr}, {"incomplete_details", nullptr}};
    if (std::string(status) == "incomplete")
        r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (c.done)
        r["usage"] = {{"input_tokens", c.n_prompt},
                      {"output_tokens", c.n_generated},
                      {"total_tokens", c.n_prompt + c.n_generated}};
    return r;
}

std::string sse_event(const char* type, json data, int& seq) {
    data["type"] = type;
    data["sequence_number"] = seq++;
    return std::string("event: ") + type + "\ndata: " + dump(data) + "\n\n";
}

}  // namespace

namespace {

const char* response_status(const ChoiceResult& c) {
    return c.finish == infer::FinishReason::Length ? "incomplete" : "completed";
}

// The events that close a streamed response once its choice is done.
std::string closing_events(const ChoiceResult& c, const Envelope& env, const std::string& msg_id,
                           const json& item, const json& part, int& seq) {
    if (c.finish == infer::FinishReason::Error)
        return sse_event("error", {{"message", c.error.message}}, seq);
    json done_part = part;
    done_part["text"] = c.text;
    json done_item = item;
    done_item["status"] = "completed";
    done_item["content"] = json::array({done_part});
    const json at = {{"item_id", msg_id}, {"output_index", 0}, {"content_index", 0}};
    json text_done = at, part_done = at;
    text_done["text"] = c.text;
    part_done["part"] = done_part;
    return sse_event("response.output_text.done", text_done, seq) +
           sse_event("response.content_part.done", part_done, seq) +
           sse_event("response.output_item.done", {{"output_index", 0}, {"item", done_item}}, seq) +
           sse_event(c.finish == infer::FinishReason::Length ? "response.incomplete"
                                                             : "response.completed",
                     {{"response", response_object(env, msg_id, c, response_status(c))}}, seq);
}

// The event sequence of OpenAI's streamed responses, text deltas in between. Writes happen
// outside g.mu, as in stream_sse.
void stream_response(Generation& g, const Envelope& env, const std::string& msg_id,
                     infer::Generator& engine, http::Responder& res) {
    res.start_stream({200, "text/event-stream", "", {{"Cache-Control", "no-cache"}}});
    int seq = 0;
    const json item = {{"type", "message"},
                       {"id", msg_id},
                       {"status", "in_progress"},
                       {"role", "assistant"},
                       {"content", json::array()}};
    const json part = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
    const json at = {{"item_id", msg_id}, {"output_index", 0}, {"content_index", 0}};
    json added = at;
    added["part"] = part;
    std::string out =
        sse_event("response.created",
                  {{"response", response_object(env, msg_id, ChoiceResult{}, "in_progress")}},
                  seq) +
        sse_event("response.output_item.added", {{"output_index", 0}, {"item", item}}, seq) +
        sse_event("response.content_part.added", added, seq);
    if (!res.write(out)) return cancel(g, engine);
    std::unique_lock lk(g.mu);
    while (true) {
        g.cv.wait_for(lk, kClientCheck, [&] { return !g.events.empty(); });
        if (res.client_gone()) break;
        out.clear();
        while (!g.events.empty()) {
            const infer::Event e = std::move(g.events.front().second);
            g.events.pop_front();
            json delta = at;
            delta["delta"] = e.text;
            if (!e.text.empty()) out += sse_event("response.output_text.delta", delta, seq);
        }
        const bool finished = g.all_done();
        if (finished) out += closing_events(g.choices[0], env, msg_id, item, part, seq);
        lk.unlock();
        if (!out.empty() && !res.write(out)) break;
        if (finished) return res.end();
        lk.lock();
    }
    if (lk.owns_lock()) lk.unlock();
    cancel(g, engine);  // the client is gone
}

}  // namespace

void serve_response(const CompletionContext& ctx, const json& body, http::Responder& res) {
    infer::Generator& engine = *ctx.engine;
    const ParsedRequest pr =
        parse_chat(responses_as_chat(body), ctx.model_name, engine, ctx.format, ctx.limits);
    const std::shared_ptr<Generation> g = submit(engine, pr);
    const Envelope env{random_id("resp_"), ctx.model_name, unix_time(), true};
    const std::string msg_id = random_id("msg_");
    try {
        if (pr.stream) return stream_response(*g, env, msg_id, engine, res);
        std::unique_lock lk(g->mu);
        while (!g->cv.wait_for(lk, kClientCheck, [&] { return g->all_done(); }))
            if (res.client_gone()) {
                lk.unlock();
                return cancel(*g, engine);
            }
        const ChoiceResult c = g->choices[0];
        lk.unlock();
        if (c.finish == infer::FinishReason::Error) throw api_error(c.error);
        res.reply(json_response(200, response_object(env, msg_id, c, response_status(c))));
    } catch (...) {
        cancel(*g, engine);
        throw;
    }
}

void serve_completion(const CompletionContext& ctx, const json& body, bool chat,
                      http::Responder& res) {
    infer::Generator& engine = *ctx.engine;
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
