#include "serve/api_server.hpp"

#include "core/error.hpp"
#include "serve/chat_page.hpp"
#include "serve/completions.hpp"
#include "serve/metrics.hpp"
#include "serve/openapi.hpp"

namespace syslm::serve {

using json = nlohmann::ordered_json;

namespace {

// How long a drain waits for answers in flight after the engine has finished its requests.
constexpr double kDrainGraceSeconds = 10;

http::Response json_response(int status, const json& j) {
    return {status, "application/json", dump(j), {}};
}

http::Response error_response(const ApiError& e) {
    return json_response(e.status, error_body(e));
}

// The transport's and router's errors (400, 404, 405, 408, 413, 503, ...) as OpenAI objects.
http::Response transport_error(int status, const std::string& message) {
    return error_response({status, status >= 500 ? "server_error" : "invalid_request_error",
                           message, "", status == 408 ? "timeout" : ""});
}

json parse_body(const http::Request& req) {
    try {
        return json::parse(req.body);
    } catch (const json::exception& e) {
        throw ApiError{400, "invalid_request_error",
                       std::string("The body is not valid JSON: ") + e.what(), "", ""};
    }
}

}  // namespace

Server::Server(const ServerConfig& cfg) : cfg_(cfg) {}

Server::~Server() {
    if (transport_) transport_->stop(0);  // before the engine goes: workers may hold it
}

void Server::set_cloud_sessions(std::unique_ptr<CloudSessions> sessions) {
    cloud_ = std::move(sessions);
}

int Server::port() const {
    return transport_ ? transport_->port() : 0;
}

void Server::start() {
    http::TransportConfig tc;
    tc.host = cfg_.host;
    tc.port = cfg_.port;
    tc.workers = cfg_.http_threads;
    tc.max_connections = cfg_.max_connections;
    tc.request_timeout_s = cfg_.request_timeout_s;
    tc.idle_timeout_s = cfg_.keep_alive_timeout_s;
    tc.write_timeout_s = cfg_.write_timeout_s;
    tc.limits.max_body = cfg_.max_body;
    tc.make_error = transport_error;
    transport_ = std::make_unique<http::Transport>(tc, routes());
    transport_->start();
}

void Server::set_engine(std::unique_ptr<infer::Generator> engine, std::string model_name,
                        tokenizer::ChatFormat format) {
    engine_ = std::move(engine);
    embedder_ = std::make_unique<Embedder>(*engine_, cfg_.pooling);
    model_name_ = std::move(model_name);
    format_ = format;
    ready_.store(true);
}

void Server::drain_and_stop() {
    draining_.store(true);
    if (engine_) engine_->drain();  // every queued and running request finishes
    if (transport_) transport_->stop(kDrainGraceSeconds);  // their last bytes go out
}

http::Router Server::routes() {
    http::Router r;
    r.set_filter([this](const http::Request& req) -> std::optional<http::Response> {
        if (req.path == "/health" || req.path == "/" || req.path.rfind("/static/", 0) == 0 ||
            cfg_.api_key.empty())
            return std::nullopt;
        const std::string* auth = req.header("authorization");
        if (auth && *auth == "Bearer " + cfg_.api_key) return std::nullopt;
        return error_response({401, "authentication_error",
                               "Missing or wrong API key: send 'Authorization: Bearer <key>'", "",
                               "invalid_api_key"});
    });
    using http::Run;
    auto member = [this](void (Server::*h)(const http::Request&, http::Responder&)) {
        return [this, h](const http::Request& req, http::Responder& res) { (this->*h)(req, res); };
    };
    // Inline: quick answers that must come even when every worker holds a generation.
    r.add("GET", "/health", Run::Inline, member(&Server::health));
    r.add("GET", "/", Run::Inline, [](const http::Request&, http::Responder& res) {
        res.reply({200, "text/html; charset=utf-8", std::string(chat_page_html()), {}});
    });
    // The page's scripts: they change only with the binary, so browsers may keep them a day.
    for (const ChatAsset& a : chat_assets()) {
        http::Response asset{200,
                             std::string(a.content_type),
                             std::string(a.body),
                             {{"Cache-Control", "max-age=86400"}}};
        r.add("GET", "/static/" + std::string(a.name), Run::Inline,
              [asset](const http::Request&, http::Responder& res) { res.reply(asset); });
    }
    r.add("GET", "/v1/models", Run::Inline, needs_engine(&Server::models));
    r.add("GET", "/lora-adapters", Run::Inline, needs_engine(&Server::lora_adapters));
    r.add("GET", "/openapi.json", Run::Inline, needs_engine(&Server::openapi));
    r.add("GET", "/metrics", Run::Inline, needs_engine(&Server::metrics));
    r.add("GET", "/stats", Run::Inline, needs_engine(&Server::stats));
    // Workers: tokenizing a large body or generating takes time.
    r.add("POST", "/tokenize", Run::Worker, needs_engine(&Server::tokenize));
    r.add("POST", "/detokenize", Run::Worker, needs_engine(&Server::detokenize));
    r.add("POST", "/apply-template", Run::Worker, needs_engine(&Server::apply_template));
    r.add("POST", "/v1/completions", Run::Worker, needs_engine(&Server::completion));
    r.add("POST", "/v1/chat/completions", Run::Worker, needs_engine(&Server::chat_completion));
    r.add("POST", "/v1/embeddings", Run::Worker, needs_engine(&Server::embeddings));
    r.add("POST", "/v1/responses", Run::Worker, needs_engine(&Server::responses));
    for (const char* path :
         {"/v1/syslm/session", "/v1/syslm/verify", "/v1/syslm/split", "/v1/syslm/close"})
        r.add("POST", path, Run::Worker, needs_engine(&Server::cloud_call));
    return r;
}

// A route that needs the model: 503 while it loads or the server drains; ApiErrors become
// OpenAI error objects.
http::Handler Server::needs_engine(void (Server::*handler)(const http::Request&,
                                                           http::Responder&)) {
    return [this, handler](const http::Request& req, http::Responder& res) {
        if (!ready_ || draining_) {
            res.reply(error_response(
                {503, "server_error",
                 draining_ ? "The server is shutting down" : "The model is loading", "", ""}));
            return;
        }
        try {
            (this->*handler)(req, res);
        } catch (const ApiError& e) {
            if (!res.started()) res.reply(error_response(e));
        }
    };
}

void Server::health(const http::Request&, http::Responder& res) {
    if (draining_)
        res.reply(json_response(503, {{"status", "shutting down"}}));
    else if (!ready_)
        res.reply(json_response(503, {{"status", "loading model"}}));
    else
        res.reply(json_response(200, {{"status", "ok"}}));
}

void Server::models(const http::Request&, http::Responder& res) {
    json data = json::array();
    data.push_back({{"id", model_name_},
                    {"object", "model"},
                    {"created", unix_time()},
                    {"owned_by", "syslm"},
                    {"meta",
                     {{"n_ctx", engine_->n_ctx()},
                      {"n_vocab", engine_->model().hparams().n_vocab},
                      {"chat_template", tokenizer::chat_format_name(format_)}}}});
    const auto& loras = engine_->loras();
    for (size_t i = 0; i < loras.size(); ++i)  // the base with each adapter, as its own model
        data.push_back({{"id", model_name_ + ":" + loras[i].name},
                        {"object", "model"},
                        {"created", unix_time()},
                        {"owned_by", "syslm"},
                        {"meta", {{"lora", {{"id", i}, {"name", loras[i].name}}}}}});
    res.reply(json_response(200, {{"object", "list"}, {"data", data}}));
}

// llama-server's GET /lora-adapters: the loaded adapters by id.
void Server::lora_adapters(const http::Request&, http::Responder& res) {
    json out = json::array();
    const auto& loras = engine_->loras();
    for (size_t i = 0; i < loras.size(); ++i)
        out.push_back({{"id", i},
                       {"name", loras[i].name},
                       {"path", loras[i].adapter->path()},
                       {"alpha", loras[i].adapter->alpha()},
                       {"matrices", loras[i].adapter->n_pairs()}});
    res.reply(json_response(200, out));
}

void Server::openapi(const http::Request&, http::Responder& res) {
    res.reply(
        json_response(200, openapi_description(cfg_.limits, engine_->model().hparams().n_vocab)));
}

void Server::metrics(const http::Request&, http::Responder& res) {
    res.reply({200,
               "text/plain; version=0.0.4",
               prometheus_text(engine_->stats()) + engine_->extra_metrics() +
                   (cloud_ ? cloud_->prometheus_text() : "") +
                   prometheus_http_text(transport_->stats()),
               {}});
}

void Server::stats(const http::Request&, http::Responder& res) {
    res.reply(json_response(200, stats_json(engine_->stats())));
}

void Server::tokenize(const http::Request& req, http::Responder& res) {
    const json body = parse_body(req);
    if (!body.is_object() || !body.contains("content") || !body["content"].is_string())
        throw ApiError{400, "invalid_request_error", "'content' must be a string", "content", ""};
    const json* as = body.contains("add_special") ? &body["add_special"] : nullptr;
    if (as && !as->is_boolean())
        throw ApiError{400, "invalid_request_error", "'add_special' must be a boolean",
                       "add_special", ""};
    const bool special = as && as->get<bool>();
    res.reply(json_response(
        200, {{"tokens",
               engine_->tokenizer().encode(body["content"].get<std::string>(), special, true)}}));
}

void Server::detokenize(const http::Request& req, http::Responder& res) {
    const json body = parse_body(req);
    const int V = engine_->model().hparams().n_vocab;
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
        throw ApiError{400, "invalid_request_error", "'tokens' must be an array", "tokens", ""};
    std::vector<int32_t> ids;
    for (const json& t : body["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= V)
            throw ApiError{400, "invalid_request_error",
                           "token ids must be integers in [0, " + std::to_string(V) + ")", "tokens",
                           ""};
        ids.push_back(t.get<int32_t>());
    }
    res.reply(json_response(200, {{"content", engine_->tokenizer().decode(ids)}}));
}

void Server::apply_template(const http::Request& req, http::Responder& res) {
    const json body = parse_body(req);
    const ToolRequest tools = parse_tools(body, tokenizer::tool_syntax(format_));
    res.reply(json_response(200, {{"prompt", chat_prompt(body, format_, tools)}}));
}

void Server::responses(const http::Request& req, http::Responder& res) {
    serve_response({engine_, model_name_, format_, cfg_.limits}, parse_body(req), res);
}

void Server::embeddings(const http::Request& req, http::Responder& res) {
    res.reply(json_response(200, embedder_->embed(parse_body(req), model_name_)));
}

void Server::completion(const http::Request& req, http::Responder& res) {
    serve_completion({engine_, model_name_, format_, cfg_.limits}, parse_body(req), false, res);
}

void Server::chat_completion(const http::Request& req, http::Responder& res) {
    serve_completion({engine_, model_name_, format_, cfg_.limits}, parse_body(req), true, res);
}

void Server::cloud_call(const http::Request& req, http::Responder& res) {
    if (!cloud_)
        throw ApiError{404, "invalid_request_error",
                       "this server is not a cloud for edges (serve --role cloud)", "", ""};
    if (req.path == "/v1/syslm/split")
        return res.reply(json_response(200, cloud_->split(req.body)));
    const json body = parse_body(req);
    if (req.path == "/v1/syslm/session")
        res.reply(json_response(200, cloud_->open(body)));
    else if (req.path == "/v1/syslm/verify")
        res.reply(json_response(200, cloud_->verify(body)));
    else
        res.reply(json_response(200, cloud_->close(body)));
}

}  // namespace syslm::serve
