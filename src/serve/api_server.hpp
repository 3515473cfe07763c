// The OpenAI-compatible server: /v1/completions, /v1/chat/completions (SSE streaming, usage),
// /v1/models, /health (503 until the engine is set, and while draining), /metrics (Prometheus),
// /stats (JSON), /tokenize, /detokenize, /apply-template (the prompt a chat request becomes),
// /openapi.json and the chat page at /, over syslm's own HTTP transport (`http_transport`).
// Binds 127.0.0.1 unless told otherwise; with an API key every route but /health and the page
// needs `Authorization: Bearer <key>`. Bodies, prompts, max_tokens and n are bounded; errors
// are OpenAI error objects (429 when the engine's queue is full, 503 when every HTTP worker is
// busy). Cheap routes (/health, /metrics, /stats, /v1/models, /openapi.json, /) answer on the
// I/O thread, so they answer even when every worker holds a generation. A client that
// disconnects cancels its request (its pages are freed at the next step).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "infer/generator.hpp"
#include "serve/cloud_sessions.hpp"
#include "serve/embeddings.hpp"
#include "serve/http_transport.hpp"
#include "serve/openai_api.hpp"

namespace syslm::serve {

struct ServerConfig {
    std::string host = "127.0.0.1";
    int port = 8080;  // 0: any free port (see Server::port)
    std::string api_key;
    size_t max_body = 1 << 20;
    ApiLimits limits;
    // HTTP workers. A completion holds one for its whole generation, so this should exceed
    // parallel + the engine's queue: then the engine's 429 is the limit, not the HTTP layer.
    int http_threads = 64;
    int max_connections = 1024;
    Pooling pooling = Pooling::Mean;   // of /v1/embeddings
    double request_timeout_s = 5;      // a request's head and body, from its first byte
    double keep_alive_timeout_s = 30;  // an idle keep-alive connection
    double write_timeout_s = 30;       // a client that accepts none of its pending answer
};

class Server {
public:
    explicit Server(const ServerConfig& cfg);
    ~Server();

    // Binds and serves on background threads; /health answers 503 until set_engine.
    void start();
    void set_engine(std::unique_ptr<infer::Generator> engine, std::string model_name,
                    tokenizer::ChatFormat format);
    // `serve --role cloud`: sessions for edges that verify their drafts here (/v1/syslm/...).
    // Before set_engine.
    void set_cloud_sessions(std::unique_ptr<CloudSessions> sessions);
    int port() const;
    // Answers 503 to new work, lets in-flight requests finish, then stops serving.
    void drain_and_stop();

private:
    http::Router routes();
    http::Handler needs_engine(void (Server::*handler)(const http::Request&, http::Responder&));

    void health(const http::Request& req, http::Responder& res);
    void models(const http::Request& req, http::Responder& res);
    void lora_adapters(const http::Request& req, http::Responder& res);
    void openapi(const http::Request& req, http::Responder& res);
    void metrics(const http::Request& req, http::Responder& res);
    void stats(const http::Request& req, http::Responder& res);
    void tokenize(const http::Request& req, http::Responder& res);
    void detokenize(const http::Request& req, http::Responder& res);
    void apply_template(const http::Request& req, http::Responder& res);
    void completion(const http::Request& req, http::Responder& res);
    void chat_completion(const http::Request& req, http::Responder& res);
    void embeddings(const http::Request& req, http::Responder& res);
    void responses(const http::Request& req, http::Responder& res);
    // POST /v1/syslm/{session,verify,close}: 404 unless this is a cloud.
    void cloud_call(const http::Request& req, http::Responder& res);

    ServerConfig cfg_;
    std::shared_ptr<infer::Generator> engine_;
    std::unique_ptr<Embedder> embedder_;
    std::unique_ptr<CloudSessions> cloud_;
    std::string model_name_;
    tokenizer::ChatFormat format_ = tokenizer::ChatFormat::ChatML;
    std::atomic<bool> ready_{false}, draining_{false};
    std::unique_ptr<http::Transport> transport_;  // stopped first: its handlers use the above
};

}  // namespace syslm::serve
