// The HTTP/1.1 transport: one I/O thread owns every socket (epoll, non-blocking), and a pool of
// workers runs the route handlers on complete requests only, so a client can hold nothing but
// its own connection however slowly or maliciously it sends:
// - a request must arrive whole (head and body) within `request_timeout_s` of its first byte
//   (a total deadline, not per read: a byte every few seconds does not keep it alive) -> 408;
// - malformed framing is answered at once (400 / 413 / 414 / 417 / 431 / 501 / 505, then close);
// - an idle keep-alive connection is closed after `idle_timeout_s` (a new one after
//   `request_timeout_s` without a byte); a response whose client accepts no bytes for
//   `write_timeout_s` is dropped (the handler sees the client gone);
// - past `max_connections` a new connection gets 503 and is closed;
// - when no worker is free the I/O thread answers 503 + Retry-After at once (Inline routes
//   still answer, on the I/O thread).
// Deadlines are checked on every epoll tick (100 ms). After an error response the connection is
// half-closed and what the client still sends is read and dropped for a moment (`linger_s`), so
// the client reads the response instead of a connection reset.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "serve/http_message.hpp"
#include "serve/http_responder.hpp"
#include "serve/http_router.hpp"
#include "serve/worker_pool.hpp"

namespace syslm::serve::http {

struct TransportConfig {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: any free port (see Transport::port)
    int workers = 16;
    int max_connections = 1024;
    double request_timeout_s = 5;   // first byte of a request to its last
    double idle_timeout_s = 30;     // keep-alive connection between requests
    double write_timeout_s = 30;    // output pending and the client accepts none of it
    double linger_s = 2;            // after an error response, see above
    size_t max_buffered = 1 << 20;  // a stream's unsent bytes before its writer waits
    ParserLimits limits;
    ErrorResponse make_error = text_error;
};

// What the transport has refused or dropped since it started, for /metrics.
struct TransportStats {
    int connections = 0;              // open now
    int64_t connections_total = 0;    // accepted
    int64_t connections_refused = 0;  // over max_connections (503)
    int64_t requests = 0;             // complete requests routed
    int64_t busy_refused = 0;         // 503: no worker free
    int64_t malformed = 0;            // refused by the parser
    int64_t timeouts = 0;             // 408: not whole within the request timeout
    int64_t write_timeouts = 0;       // dropped: the client stopped reading
};

class Transport : private Waker {
public:
    Transport(TransportConfig cfg, Router router);
    ~Transport();  // stop(0)
    Transport(const Transport&) = delete;
    Transport& operator=(const Transport&) = delete;

    // Binds and listens (throws with the address when it cannot), starts the I/O thread and
    // the workers.
    void start();
    int port() const { return port_; }
    TransportStats stats() const;
    // Stops accepting connections, waits up to `grace_s` for the requests in progress to be
    // answered, then closes every connection (handlers still running see their client gone)
    // and joins the threads. Idempotent.
    void stop(double grace_s);

private:
    struct Connection;
    void wake(uint64_t conn_id) override;
    bool stopping() const override { return stop_accepting_.load(); }
    void loop();
    void accept_all();
    void on_event(Connection& c, uint32_t events);
    void read_input(Connection& c);
    void parse(Connection& c);
    void dispatch(Connection& c, Request req);
    void respond_error(Connection& c, int status, const std::string& message);
    void flush(Connection& c);
    void next_request(Connection& c);
    void begin_close(Connection& c);
    void close(Connection& c);
    void set_interest(Connection& c, uint32_t events);
    void set_busy(Connection& c, bool busy);
    void check_deadlines();
    void run_handler(const Router::Route& route, const Request& req, Responder& res);

    TransportConfig cfg_;
    Router router_;
    std::unique_ptr<WorkerPool> pool_;
    int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
    int port_ = 0;
    std::thread io_thread_;
    // I/O thread only:
    uint64_t next_id_ = 2;  // 0: the listener, 1: the wake eventfd
    std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns_;
    int open_ = 0;                       // connections not closed
    std::vector<uint64_t> parse_queue_;  // buffered (pipelined) bytes to parse next
    std::vector<uint64_t> dead_;         // closed this iteration, erased at its end
    bool accept_paused_ = false;         // out of file descriptors: retried on the next tick
    std::vector<char> scratch_;

    std::mutex wake_mu_;
    std::vector<uint64_t> wakes_;  // connections with new output, under wake_mu_
    std::atomic<bool> stop_accepting_{false}, quit_{false}, stopped_{false};
    std::atomic<int> busy_{0};  // connections with a request routed and not yet fully answered

    mutable std::mutex stats_mu_;
    TransportStats stats_;
};

}  // namespace syslm::serve::http
