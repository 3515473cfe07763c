// The OpenAI-compatible HTTP server (cpp-httplib): /v1/completions, /v1/chat/completions
// (SSE streaming, usage), /v1/models, /health (503 until the engine is set, and while
// draining), /metrics (Prometheus), /stats (JSON), /tokenize, /detokenize, /apply-template
// (the prompt a chat request becomes) and the chat page at /.
// Binds 127.0.0.1 unless told otherwise; with an API key every route but /health and the page
// needs `Authorization: Bearer <key>`. Bodies, prompts, max_tokens and n are bounded; errors
// are OpenAI error objects with 4xx codes (429 when the queue is full). A streaming client that
// disconnects cancels its request (its pages are freed at the next step).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "infer/engine.hpp"
#include "serve/openai_api.hpp"

namespace httplib {
class Server;
}

namespace syslm::serve {

struct ServerConfig {
    std::string host = "127.0.0.1";
    int port = 8080;  // 0: any free port (see Server::port)
    std::string api_key;
    size_t max_body = 1 << 20;
    ApiLimits limits;
    int http_threads = 0;  // 0: 2 x parallel + 16
};

class Server {
public:
    explicit Server(const ServerConfig& cfg);
    ~Server();

    // Binds and serves on a background thread; /health answers 503 until set_engine.
    void start();
    void set_engine(std::unique_ptr<infer::Engine> engine, std::string model_name,
                    tokenizer::ChatFormat format);
    int port() const { return port_; }
    // Stops accepting requests (503), lets in-flight ones finish, then stops serving.
    void drain_and_stop();

private:
    void routes();

    ServerConfig cfg_;
    std::unique_ptr<httplib::Server> svr_;
    std::thread thread_;
    int port_ = 0;
    std::shared_ptr<infer::Engine> engine_;
    std::string model_name_;
    tokenizer::ChatFormat format_ = tokenizer::ChatFormat::ChatML;
    std::atomic<bool> ready_{false}, draining_{false};
    std::atomic<int> in_flight_{0};
};

}  // namespace syslm::serve
