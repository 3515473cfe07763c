#include "serve/http_router.hpp"

#include "core/error.hpp"

namespace syslm::serve::http {

void Router::add(std::string method, std::string path, Run run, Handler handler) {
    for (const Route& r : routes_)
        SYSLM_CHECK(r.method != method || r.path != path, "http: route ", method, " ", path,
                    " is registered twice");
    routes_.push_back({std::move(method), std::move(path), run, std::move(handler)});
}

void Router::set_filter(std::function<std::optional<Response>(const Request&)> filter) {
    filter_ = std::move(filter);
}

Router::Match Router::resolve(const Request& req, const ErrorResponse& make_error) const {
    if (filter_)
        if (std::optional<Response> r = filter_(req)) return {nullptr, std::move(r), false};
    const bool head = req.method == "HEAD";
    std::string allow;
    bool has_get = false;
    for (const Route& r : routes_) {
        if (r.path != req.path) continue;
        if (r.method == req.method) return {&r, std::nullopt, false};
        if (head && r.method == "GET") return {&r, std::nullopt, true};
        allow += (allow.empty() ? "" : ", ") + r.method;
        has_get |= r.method == "GET";
    }
    if (allow.empty())
        return {nullptr, make_error(404, "No route " + req.method + " " + req.path), false};
    if (has_get) allow += ", HEAD";
    Response r = make_error(405, "Method " + req.method + " is not allowed on " + req.path +
                                     " (allowed: " + allow + ")");
    r.headers.emplace_back("Allow", allow);
    return {nullptr, std::move(r), false};
}

}  // namespace syslm::serve::http
