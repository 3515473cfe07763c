// Routes: (method, exact path) -> handler, and where it runs: `Inline` on the transport's I/O
// thread (cheap answers that must come even when every worker is busy: /health, /metrics, ...)
// or on a `Worker`. A filter runs before routing (authentication). An unknown path is 404; a
// known path with another method is 405 with an `Allow` header; HEAD runs the GET route with
// the body left out. Inline handlers must reply at once and never stream: a stream's writer may
// wait for the I/O thread to send, which would then be waiting for itself.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "serve/http_message.hpp"
#include "serve/http_responder.hpp"

namespace syslm::serve::http {

using Handler = std::function<void(const Request&, Responder&)>;

enum class Run { Inline, Worker };

class Router {
public:
    struct Route {
        std::string method, path;
        Run run;
        Handler handler;
    };
    // What to do with a request: run `route`, or answer `answer` at once.
    struct Match {
        const Route* route = nullptr;
        std::optional<Response> answer;
        bool head_only = false;
    };

    void add(std::string method, std::string path, Run run, Handler handler);
    // Answers instead of routing when it returns a response (e.g. 401).
    void set_filter(std::function<std::optional<Response>(const Request&)> filter);

    Match resolve(const Request& req, const ErrorResponse& make_error) const;

private:
    std::vector<Route> routes_;
    std::function<std::optional<Response>(const Request&)> filter_;
};

}  // namespace syslm::serve::http
