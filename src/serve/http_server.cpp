#include "serve/http_server.hpp"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>

#include "core/error.hpp"
#include "serve/chat_page.hpp"
#include "serve/metrics.hpp"
#include "serve/openapi.hpp"

namespace syslm::serve {

using nlohmann::json;

namespace {

std::string dump(const json& j) {  // model text may hold invalid UTF-8: replace, never throw
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_json(httplib::Response& res, int status, const json& j) {
    res.status = status;
    res.set_content(dump(j), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
    send_json(res, e.status, error_body(e));
}

int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string random_id(const char* prefix) {
    static std::mt19937_64 rng{std::random_device{}()};
    static std::mutex mu;
    std::lock_guard lk(mu);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
    return buf;
}

// The events of one HTTP request's choices, filled by the engine thread, drained by the
// handler (or the streaming provider).
struct Choice {
    std::string text;
    std::vector<infer::Event> tokens;  // for logprobs
    std::string finish, error;
    int64_t n_prompt = 0, n_generated = 0;
    bool done = false;
};

struct Exchange {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<int, infer::Event>> events;  // (choice, event), for streaming
    std::vector<Choice> choices;
    std::vector<int64_t> ids;
    std::atomic<bool> cancelled{false};
    bool stream = false;
    int done = 0, begun = 0;  // choices finished / with at least one event

};

// The engine's callback for one choice. It owns a reference: the engine may still call it after
// the HTTP side has let go (a client that disconnected), until the cancellation lands.
infer::Engine::Callback callback(std::shared_ptr<Exchange> ex, int index) {
    return [ex = std::move(ex), index](const infer::Event& e) {
        std::lock_guard lk(ex->mu);
        Choice& c = ex->choices[static_cast<size_t>(index)];
        if (c.tokens.empty() && !c.done && (e.token >= 0 || e.done)) ++ex->begun;
        c.text += e.text;
        if (e.token >= 0) c.tokens.push_back(e);
        if (e.done) {
            c.done = true;
            c.finish = e.finish_reason;
            c.error = e.error;
            c.n_prompt = e.n_prompt;
            c.n_generated = e.n_generated;
            ++ex->done;
        }
        if (ex->stream) ex->events.emplace_back(index, e);
        ex->cv.notify_all();
        return !ex->cancelled.load();
    };
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
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

}  // namespace

Server::Server(const ServerConfig& cfg) : cfg_(cfg), svr_(std::make_unique<httplib::Server>()) {}

Server::~Server() {
    if (svr_) svr_->stop();
    if (thread_.joinable()) thread_.join();
}

void Server::start() {
    const int threads = cfg_.http_threads > 0 ? cfg_.http_threads : 48;
    svr_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr_->set_payload_max_length(cfg_.max_body);
    svr_->set_read_timeout(60, 0);
    svr_->set_write_timeout(60, 0);
    routes();
    if (cfg_.port == 0)
        port_ = svr_->bind_to_any_port(cfg_.host);
    else
        port_ = svr_->bind_to_port(cfg_.host, cfg_.port) ? cfg_.port : -1;
    SYSLM_CHECK(port_ > 0, "serve: cannot listen on ", cfg_.host, ":", cfg_.port,
                " (in use, or not an address of this machine)");
    thread_ = std::thread([this] { svr_->listen_after_bind(); });
}

void Server::set_engine(std::unique_ptr<infer::Engine> engine, std::string model_name,
                        tokenizer::ChatFormat format) {
    engine_ = std::move(engine);
    model_name_ = std::move(model_name);
    format_ = format;
    ready_.store(true);
}

void Server::drain_and_stop() {
    draining_.store(true);
    if (engine_) engine_->drain();
    // Let the handlers write their last bytes.
    for (int i = 0; i < 200 && in_flight_.load() > 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    svr_->stop();
    if (thread_.joinable()) thread_.join();
}

void Server::routes() {
    httplib::Server& s = *svr_;

    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (req.path == "/health" || req.path == "/" || cfg_.api_key.empty())
            return httplib::Server::HandlerResponse::Unhandled;
        if (req.get_header_value("Authorization") == "Bearer " + cfg_.api_key)
            return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, {401, "authentication_error",
                         "Missing or wrong API key: send 'Authorization: Bearer <key>'", "",
                         "invalid_api_key"});
        return httplib::Server::HandlerResponse::Handled;
    });
    s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        if (res.status == 404)
            send_error(res, {404, "invalid_request_error", "No route " + req.method + " " + req.path,
                             "", ""});
        else if (res.status == 413)
            send_error(res, {413, "invalid_request_error", "The request body is too large", "",
                             ""});
    });
    s.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                               std::exception_ptr ep) {
        std::string what = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, {500, "server_error", what, "", ""});
    });

    s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        if (draining_)
            send_json(res, 503, {{"status", "shutting down"}});
        else if (!ready_)
            send_json(res, 503, {{"status", "loading model"}});
        else
            send_json(res, 200, {{"status", "ok"}});
    });
    s.Get("/", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(chat_page_html(), "text/html; charset=utf-8");
    });

    // Everything below needs the engine.
    auto with_engine = [this](auto handler) {
        return [this, handler](const httplib::Request& req, httplib::Response& res) {
            if (!ready_ || draining_) {
                send_error(res, {503, "server_error",
                                 draining_ ? "The server is shutting down" : "The model is loading",
                                 "", ""});
                return;
            }
            ++in_flight_;
            struct Done {
                std::atomic<int>& n;
                ~Done() { --n; }
            } done{in_flight_};
            try {
                handler(req, res);
            } catch (const ApiError& e) {
                send_error(res, e);
            }
        };
    };
    auto parse_body = [](const httplib::Request& req) {
        try {
            return json::parse(req.body);
        } catch (const json::exception& e) {
            throw ApiError{400, "invalid_request_error",
                           std::string("The body is not valid JSON: ") + e.what(), "", ""};
        }
    };

    s.Get("/v1/models", with_engine([this](const httplib::Request&, httplib::Response& res) {
              send_json(res, 200,
                        {{"object", "list"},
                         {"data",
                          {{{"id", model_name_},
                            {"object", "model"},
                            {"created", unix_time()},
                            {"owned_by", "syslm"},
                            {"meta",
                             {{"n_ctx", engine_->config().n_ctx},
                              {"n_vocab", engine_->model().hparams().n_vocab},
                              {"chat_template", tokenizer::chat_format_name(format_)}}}}}}});
          }));
    s.Get("/openapi.json", with_engine([this](const httplib::Request&, httplib::Response& res) {
              send_json(res, 200, openapi_description(cfg_.limits,
                                                      engine_->model().hparams().n_vocab));
          }));
    s.Get("/metrics", with_engine([this](const httplib::Request&, httplib::Response& res) {
              res.set_content(prometheus_text(engine_->stats()), "text/plain; version=0.0.4");
          }));
    s.Get("/stats", with_engine([this](const httplib::Request&, httplib::Response& res) {
              send_json(res, 200, stats_json(engine_->stats()));
          }));
    s.Post("/tokenize", with_engine([this, parse_body](const httplib::Request& req,
                                                       httplib::Response& res) {
               const json body = parse_body(req);
               if (!body.is_object() || !body.contains("content") || !body["content"].is_string())
                   throw ApiError{400, "invalid_request_error", "'content' must be a string",
                                  "content", ""};
               const json* as = body.contains("add_special") ? &body["add_special"] : nullptr;
               if (as && !as->is_boolean())
                   throw ApiError{400, "invalid_request_error", "'add_special' must be a boolean",
                                  "add_special", ""};
               const bool special = as && as->get<bool>();
               send_json(res, 200,
                         {{"tokens", engine_->tokenizer().encode(body["content"].get<std::string>(),
                                                                 special, true)}});
           }));
    s.Post("/apply-template", with_engine([this, parse_body](const httplib::Request& req,
                                                             httplib::Response& res) {
               const json body = parse_body(req);
               send_json(res, 200, {{"prompt", tokenizer::apply_chat_template(
                                                   format_, parse_messages(body), true)}});
           }));
    s.Post("/detokenize", with_engine([this, parse_body](const httplib::Request& req,
                                                         httplib::Response& res) {
               const json body = parse_body(req);
               std::vector<int32_t> ids;
               const int V = engine_->model().hparams().n_vocab;
               if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
                   throw ApiError{400, "invalid_request_error", "'tokens' must be an array",
                                  "tokens", ""};
               for (const json& t : body["tokens"]) {
                   if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= V)
                       throw ApiError{400, "invalid_request_error",
                                      "token ids must be integers in [0, " + std::to_string(V) + ")",
                                      "tokens", ""};
                   ids.push_back(t.get<int32_t>());
               }
               send_json(res, 200, {{"content", engine_->tokenizer().decode(ids)}});
           }));

    auto generate = [this, parse_body](const httplib::Request& req, httplib::Response& res,
                                       bool chat) {
        const json body = parse_body(req);
        ParsedRequest pr = chat ? parse_chat(body, model_name_, *engine_, format_, cfg_.limits)
                                : parse_completion(body, model_name_, *engine_, cfg_.limits);
        auto ex = std::make_shared<Exchange>();
        ex->stream = pr.stream;
        const size_t n_choices = pr.prompts.size() * static_cast<size_t>(pr.n);
        ex->choices.resize(n_choices);
        for (size_t i = 0; i < n_choices; ++i) {
            infer::GenerationParams params = pr.params;
            params.sampling.seed += i;  // n choices: different draws
            int64_t id = 0;
            std::string error;
            if (!engine_->submit(pr.prompts[i / static_cast<size_t>(pr.n)], params,
                                 callback(ex, static_cast<int>(i)), &id, &error)) {
                ex->cancelled = true;
                for (int64_t other : ex->ids) engine_->cancel(other);
                if (error == "queue full")
                    throw ApiError{429, "rate_limit_exceeded",
                                   "The server is busy (request queue full); retry later", "", ""};
                if (error == "the server is shutting down")
                    throw ApiError{503, "server_error", "The server is shutting down", "", ""};
                throw ApiError{400, "invalid_request_error", error, "", ""};
            }
            ex->ids.push_back(id);
        }
        const std::string rid = random_id(chat ? "chatcmpl-" : "cmpl-");
        const int64_t created = unix_time();
        const std::string model = model_name_;
        std::shared_ptr<infer::Engine> engine = engine_;

        if (!pr.stream) {
            // The whole answer as one JSON object: built once every choice is done (under
            // ex->mu). Errors decided before the first token keep their HTTP status.
            auto answer = [=]() -> std::pair<int, json> {
                json choices = json::array();
                for (size_t i = 0; i < n_choices; ++i) {
                    const Choice& c = ex->choices[i];
                    if (c.finish == "error")
                        return {c.error.find("KV memory") != std::string::npos ? 400 : 500,
                                error_body({0, "server_error", c.error, "", ""})};
                    json lp = nullptr;
                    if (pr.params.logprobs >= 0) {
                        if (chat) {
                            lp = {{"content", json::array()}};
                            for (const auto& e : c.tokens)
                                lp["content"].push_back(chat_logprob(e, engine->tokenizer()));
                        } else {
                            const std::string& ptext =
                                pr.prompt_texts[i / static_cast<size_t>(pr.n)];
                            lp = completion_logprobs(c, engine->tokenizer(),
                                                     pr.echo ? ptext.size() : 0);
                        }
                    }
                    if (chat)
                        choices.push_back(
                            {{"index", i},
                             {"message", {{"role", "assistant"}, {"content", c.text}}},
                             {"logprobs", lp},
                             {"finish_reason", c.finish}});
                    else
                        choices.push_back(
                            {{"index", i},
                             {"text", (pr.echo ? pr.prompt_texts[i / static_cast<size_t>(pr.n)]
                                               : "") +
                                          c.text},
                             {"logprobs", lp},
                             {"finish_reason", c.finish}});
                }
                return {200, {{"id", rid},
                              {"object", chat ? "chat.completion" : "text_completion"},
                              {"created", created},
                              {"model", model},
                              {"choices", choices},
                              {"usage", usage(ex->choices, static_cast<size_t>(pr.n))}}};
            };
            {
                std::unique_lock lk(ex->mu);  // until done, or every choice has begun
                ex->cv.wait(lk, [&] {
                    return ex->done == static_cast<int>(n_choices) ||
                           ex->begun == static_cast<int>(n_choices);
                });
                if (ex->done == static_cast<int>(n_choices)) {
                    auto [status, body] = answer();
                    send_json(res, status, body);
                    return;
                }
            }
            // Generating: wait on the connection, so a client that goes away cancels it.
            ++in_flight_;
            res.set_chunked_content_provider(
                "application/json",
                [=](size_t, httplib::DataSink& sink) {
                    std::unique_lock lk(ex->mu);
                    while (!ex->cv.wait_for(lk, std::chrono::milliseconds(200), [&] {
                        return ex->done == static_cast<int>(n_choices);
                    })) {
                        if (!sink.is_writable()) {
                            ex->cancelled = true;
                            for (int64_t id : ex->ids) engine->cancel(id);
                            return false;
                        }
                    }
                    const std::string out = dump(answer().second);
                    if (!sink.write(out.data(), out.size())) return false;
                    sink.done();
                    return true;
                },
                [this, ex, engine](bool) {
                    if (ex->done < static_cast<int>(ex->choices.size())) {
                        ex->cancelled = true;
                        for (int64_t id : ex->ids) engine->cancel(id);
                    }
                    --in_flight_;
                });
            return;
        }

        // Streaming: one SSE chunk per event; a failed write (client gone) cancels the request.
        auto chunk = [=](json choice) {
            return "data: " +
                   dump({{"id", rid},
                         {"object", chat ? "chat.completion.chunk" : "text_completion"},
                         {"created", created},
                         {"model", model},
                         {"choices", json::array({std::move(choice)})}}) +
                   "\n\n";
        };
        const bool include_usage = pr.include_usage;
        const int logprobs = pr.params.logprobs;
        auto started = std::make_shared<std::vector<bool>>(n_choices, false);
        auto finished_stream = std::make_shared<bool>(false);
        res.set_header("Cache-Control", "no-cache");
        ++in_flight_;  // until the stream ends (drain waits for it)
        res.set_chunked_content_provider(
            "text/event-stream",
            [=](size_t, httplib::DataSink& sink) {
                auto cancel = [&] {
                    ex->cancelled = true;
                    for (int64_t id : ex->ids) engine->cancel(id);
                    return false;
                };
                if (*finished_stream) return false;
                std::unique_lock lk(ex->mu);
                while (true) {
                    ex->cv.wait_for(lk, std::chrono::milliseconds(200),
                                    [&] { return !ex->events.empty(); });
                    if (!sink.is_writable()) return cancel();
                    while (!ex->events.empty()) {
                        auto [index, e] = std::move(ex->events.front());
                        ex->events.pop_front();
                        std::string out;
                        if (chat && !(*started)[static_cast<size_t>(index)]) {
                            (*started)[static_cast<size_t>(index)] = true;
                            out += chunk({{"index", index},
                                          {"delta", {{"role", "assistant"}, {"content", ""}}},
                                          {"logprobs", nullptr},
                                          {"finish_reason", nullptr}});
                        }
                        if (e.done && e.finish_reason == "error") {
                            out += "data: " +
                                   dump(error_body({500, "server_error", e.error, "", ""})) +
                                   "\n\n";
                        }
                        if (!e.text.empty() || (e.token >= 0 && logprobs >= 0)) {
                            json lp = nullptr;
                            if (logprobs >= 0 && e.token >= 0)
                                lp = chat ? json{{"content", json::array({chat_logprob(
                                                                e, engine->tokenizer())})}}
                                          : json{{"tokens", {engine->tokenizer().token_to_piece(e.token)}},
                                                 {"token_logprobs", {e.logprob}}};
                            out += chat ? chunk({{"index", index},
                                                 {"delta", {{"content", e.text}}},
                                                 {"logprobs", lp},
                                                 {"finish_reason", nullptr}})
                                        : chunk({{"index", index},
                                                 {"text", e.text},
                                                 {"logprobs", lp},
                                                 {"finish_reason", nullptr}});
                        }
                        if (e.done && e.finish_reason != "error") {
                            out += chat ? chunk({{"index", index},
                                                 {"delta", json::object()},
                                                 {"logprobs", nullptr},
                                                 {"finish_reason", e.finish_reason}})
                                        : chunk({{"index", index},
                                                 {"text", ""},
                                                 {"logprobs", nullptr},
                                                 {"finish_reason", e.finish_reason}});
                        }
                        if (!out.empty() && !sink.write(out.data(), out.size())) return cancel();
                    }
                    if (ex->done == static_cast<int>(n_choices)) {
                        std::string out;
                        if (include_usage)
                            out += "data: " +
                                   dump({{"id", rid},
                                         {"object", chat ? "chat.completion.chunk" : "text_completion"},
                                         {"created", created},
                                         {"model", model},
                                         {"choices", json::array()},
                                         {"usage", usage(ex->choices, n_choices / pr.prompts.size())}}) +
                                   "\n\n";
                        out += "data: [DONE]\n\n";
                        if (!sink.write(out.data(), out.size())) return cancel();
                        *finished_stream = true;
                        sink.done();
                        return true;
                    }
                }
            },
            [this, ex, engine](bool success) {  // the connection is over: nothing left to run
                if (!success || ex->done < static_cast<int>(ex->choices.size())) {
                    ex->cancelled = true;
                    for (int64_t id : ex->ids) engine->cancel(id);
                }
                --in_flight_;
            });
    };
    s.Post("/v1/completions",
           with_engine([generate](const httplib::Request& req, httplib::Response& res) {
               generate(req, res, false);
           }));
    s.Post("/v1/chat/completions",
           with_engine([generate](const httplib::Request& req, httplib::Response& res) {
               generate(req, res, true);
           }));
}

}  // namespace syslm::serve
