#include "serve/http_transport.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"

namespace syslm::serve::http {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenerId = 0, kWakeId = 1;
constexpr int kTickMs = 100;              // how often deadlines are checked
constexpr size_t kReadChunk = 64 * 1024;  // per read; one read per readiness event (fairness)
constexpr int kRefusedSlack = 64;         // connections past the cap that still get their 503

Clock::duration secs(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string seconds_text(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", s);
    return buf;
}

}  // namespace

struct Transport::Connection {
    enum class State {
        Reading,    // receiving a request (or idle between requests)
        Busy,       // a request is being answered
        Lingering,  // answered and half-closed: dropping what the client still sends
    };
    uint64_t id = 0;
    int fd = -1;
    State state = State::Reading;
    std::string in;  // received, not yet parsed
    RequestParser parser;
    std::shared_ptr<Outbox> out;  // the current exchange's output
    Clock::time_point deadline;   // Reading: the request's (or idle) deadline; Lingering: its end
    Clock::time_point progress;   // the last write progress, or when output became pending
    bool pending = false;         // output waiting for the socket
    bool continue_sent = false, peer_closed = false, busy = false;
    uint32_t events = 0;
};

Transport::Transport(TransportConfig cfg, Router router)
    : cfg_(std::move(cfg)), router_(std::move(router)), scratch_(kReadChunk) {
    SYSLM_CHECK(cfg_.request_timeout_s > 0 && cfg_.idle_timeout_s > 0 && cfg_.write_timeout_s > 0,
                "serve: the request, keep-alive and write timeouts must be positive");
    SYSLM_CHECK(cfg_.max_connections > 0, "serve: max connections must be positive, not ",
                cfg_.max_connections);
    if (!cfg_.make_error) cfg_.make_error = text_error;
}

Transport::~Transport() {
    stop(0);
}

void Transport::start() {
    // Room for every connection plus what the process already holds (model file, pipes).
    const rlim_t need = static_cast<rlim_t>(cfg_.max_connections) + kRefusedSlack + 128;
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
        rl.rlim_cur = std::min(need, rl.rlim_max);
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    SYSLM_CHECK(rl.rlim_cur >= need, "serve: ", cfg_.max_connections, " connections need about ",
                need, " open files but the limit is ", rl.rlim_cur,
                " (raise `ulimit -n` or lower --max-connections)");

    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* addrs = nullptr;
    const std::string port = std::to_string(cfg_.port);
    const int rc =
        getaddrinfo(cfg_.host.empty() ? nullptr : cfg_.host.c_str(), port.c_str(), &hints, &addrs);
    SYSLM_CHECK(rc == 0, "serve: cannot resolve the address '", cfg_.host, "': ", gai_strerror(rc));
    std::string why = "no address";
    for (addrinfo* a = addrs; a && listen_fd_ < 0; a = a->ai_next) {
        const int fd =
            socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            why = std::strerror(errno);
            continue;
        }
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
            listen_fd_ = fd;
        } else {
            why = std::strerror(errno);
            ::close(fd);
        }
    }
    freeaddrinfo(addrs);
    SYSLM_CHECK(listen_fd_ >= 0, "serve: cannot listen on ", cfg_.host, ":", cfg_.port, ": ", why,
                " (in use, or not an address of this machine)");
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    SYSLM_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0, "serve: epoll/eventfd: ", std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenerId;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    ev.data.u64 = kWakeId;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);

    pool_ = std::make_unique<WorkerPool>(cfg_.workers);
    io_thread_ = std::thread([this] { loop(); });
}

TransportStats Transport::stats() const {
    std::lock_guard lk(stats_mu_);
    return stats_;
}

void Transport::stop(double grace_s) {
    if (stopped_.exchange(true)) return;
    if (io_thread_.joinable()) {
        stop_accepting_ = true;
        wake(kListenerId);
        const auto deadline = Clock::now() + secs(grace_s);
        while (Clock::now() < deadline && (busy_.load() > 0 || pool_->busy() > 0))
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        quit_ = true;
        wake(kListenerId);
        io_thread_.join();  // closes every connection: running handlers see their client gone
    }
    if (pool_) pool_->stop();
    for (int* fd : {&listen_fd_, &epoll_fd_, &wake_fd_})
        if (*fd >= 0) {
            ::close(*fd);
            *fd = -1;
        }
}

void Transport::wake(uint64_t conn_id) {
    bool first = false;
    {
        std::lock_guard lk(wake_mu_);
        first = wakes_.empty();
        wakes_.push_back(conn_id);
    }
    if (first) {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
    }
}

void Transport::loop() {
    epoll_event events[256];
    auto next_tick = Clock::now() + std::chrono::milliseconds(kTickMs);
    while (!quit_) {
        if (stop_accepting_ && listen_fd_ >= 0) {
            epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
            ::close(listen_fd_);
            listen_fd_ = -1;
        }
        const int n = epoll_wait(epoll_fd_, events, 256, kTickMs);
        if (n < 0 && errno != EINTR) {
            std::fprintf(stderr, "syslm serve: epoll_wait: %s\n", std::strerror(errno));
            std::this_thread::sleep_for(std::chrono::milliseconds(kTickMs));
        }
        for (int i = 0; i < n; ++i) {
            const uint64_t id = events[i].data.u64;
            if (id == kListenerId) {
                if (listen_fd_ >= 0) accept_all();
            } else if (id == kWakeId) {
                uint64_t count = 0;
                [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof count);
                std::vector<uint64_t> ids;
                {
                    std::lock_guard lk(wake_mu_);
                    ids.swap(wakes_);
                }
                for (uint64_t cid : ids)
                    if (auto it = conns_.find(cid); it != conns_.end() && it->second->fd >= 0)
                        flush(*it->second);
            } else if (auto it = conns_.find(id); it != conns_.end() && it->second->fd >= 0) {
                on_event(*it->second, events[i].events);
            }
        }
        while (!parse_queue_.empty()) {  // pipelined requests, after the previous answer
            std::vector<uint64_t> ids;
            ids.swap(parse_queue_);
            for (uint64_t cid : ids)
                if (auto it = conns_.find(cid); it != conns_.end() && it->second->fd >= 0 &&
                                                it->second->state == Connection::State::Reading)
                    parse(*it->second);
        }
        if (Clock::now() >= next_tick) {
            check_deadlines();
            next_tick = Clock::now() + std::chrono::milliseconds(kTickMs);
            if (accept_paused_ && listen_fd_ >= 0) {  // file descriptors may be free again
                epoll_event ev{};
                ev.events = EPOLLIN;
                ev.data.u64 = kListenerId;
                epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
                accept_paused_ = false;
            }
        }
        for (uint64_t id : dead_) conns_.erase(id);
        dead_.clear();
    }
    for (auto& [id, c] : conns_) close(*c);
    conns_.clear();
    dead_.clear();
}

void Transport::accept_all() {
    while (true) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                // Level-triggered: the pending connection would wake us forever. Wait a tick.
                epoll_event ev{};
                ev.data.u64 = kListenerId;
                epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
                accept_paused_ = true;
            }
            return;
        }
        if (open_ >= cfg_.max_connections + kRefusedSlack) {  // not even room for a 503
            ::close(fd);
            std::lock_guard lk(stats_mu_);
            ++stats_.connections_refused;
            continue;
        }
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // SSE tokens go at once
        auto owned = std::make_unique<Connection>();
        Connection& c = *owned;
        c.id = next_id_++;
        c.fd = fd;
        c.parser = RequestParser(cfg_.limits);
        c.out = std::make_shared<Outbox>(c.id, static_cast<Waker*>(this), cfg_.max_buffered);
        c.deadline = Clock::now() + secs(cfg_.request_timeout_s);  // the first byte is due
        conns_.emplace(c.id, std::move(owned));
        ++open_;
        set_interest(c, EPOLLIN | EPOLLRDHUP);
        bool refuse = false;
        {
            std::lock_guard lk(stats_mu_);
            ++stats_.connections_total;
            stats_.connections = open_;
            if (open_ > cfg_.max_connections) {
                ++stats_.connections_refused;
                refuse = true;
            }
        }
        if (refuse)
            respond_error(c, 503,
                          "The server has too many open connections (" +
                              std::to_string(cfg_.max_connections) + "); retry later");
    }
}

void Transport::set_interest(Connection& c, uint32_t events) {
    if (c.fd < 0 || events == c.events) return;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = c.id;
    epoll_ctl(epoll_fd_, c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &ev);
    c.events = events;
}

void Transport::set_busy(Connection& c, bool busy) {
    if (c.busy != busy) busy_ += busy ? 1 : -1;
    c.busy = busy;
}

void Transport::on_event(Connection& c, uint32_t events) {
    if (events & EPOLLOUT) flush(c);
    if (c.fd >= 0 && (events & EPOLLIN)) read_input(c);
    if (c.fd < 0) return;
    if (events & (EPOLLERR | EPOLLHUP)) {
        close(c);
    } else if ((events & EPOLLRDHUP) && c.state == Connection::State::Busy) {
        close(c);  // the client hung up before its answer: the handler sees it gone
    }
}

void Transport::read_input(Connection& c) {
    if (c.state == Connection::State::Busy) return;  // not asked for; the next request waits
    const ssize_t n = ::recv(c.fd, scratch_.data(), scratch_.size(), 0);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) close(c);
        return;
    }
    if (n == 0) {  // the client closed: a partial request gets no answer
        c.peer_closed = true;
        close(c);
        return;
    }
    if (c.state == Connection::State::Lingering) return;  // dropped
    c.in.append(scratch_.data(), static_cast<size_t>(n));
    parse(c);
}

void Transport::parse(Connection& c) {
    if (c.in.empty()) return;
    // A request's clock starts at its first byte; it must be whole by the deadline.
    if (!c.parser.started()) c.deadline = Clock::now() + secs(cfg_.request_timeout_s);
    switch (c.parser.feed(c.in)) {
        case RequestParser::Status::NeedMore:
            if (c.parser.awaiting_body() && c.parser.request().expect_continue &&
                !c.continue_sent) {
                c.continue_sent = true;
                {
                    std::lock_guard lk(c.out->mu);
                    c.out->buf += kContinue;
                }
                flush(c);
            }
            break;
        case RequestParser::Status::Failed: {
            {
                std::lock_guard lk(stats_mu_);
                ++stats_.malformed;
            }
            const ParseError& e = c.parser.error();
            respond_error(c, e.status, e.message);
            break;
        }
        case RequestParser::Status::Complete:
            dispatch(c, c.parser.take());
            break;
    }
}

void Transport::dispatch(Connection& c, Request req) {
    {
        std::lock_guard lk(stats_mu_);
        ++stats_.requests;
    }
    c.state = Connection::State::Busy;
    set_busy(c, true);
    set_interest(c, EPOLLRDHUP | (c.pending ? EPOLLOUT : 0u));
    Router::Match m = router_.resolve(req, cfg_.make_error);
    {
        std::lock_guard lk(c.out->mu);
        c.out->framing = {req.version, req.keep_alive && !stop_accepting_, m.head_only};
    }
    Responder res(c.out);
    if (m.answer) {
        res.reply(*m.answer);
    } else if (m.route->run == Run::Inline) {
        run_handler(*m.route, req, res);
    } else {
        std::function<void()> job = [this, route = m.route, req = std::move(req), res]() mutable {
            run_handler(*route, req, res);
        };
        if (!pool_->try_run(job)) {
            {
                std::lock_guard lk(stats_mu_);
                ++stats_.busy_refused;
            }
            Response r = cfg_.make_error(503, "Every HTTP worker is busy; retry later");
            r.headers.emplace_back("Retry-After", "1");
            res.reply(r);
        }
    }
    flush(c);
}

void Transport::run_handler(const Router::Route& route, const Request& req, Responder& res) {
    std::string error;
    try {
        route.handler(req, res);
        res.finish(nullptr, cfg_.make_error);
        return;
    } catch (const std::exception& e) {
        error = e.what();
    } catch (...) {
        error = "unknown exception";
    }
    res.finish(&error, cfg_.make_error);
}

void Transport::respond_error(Connection& c, int status, const std::string& message) {
    c.state = Connection::State::Busy;
    set_interest(c, EPOLLRDHUP | (c.pending ? EPOLLOUT : 0u));
    {
        std::lock_guard lk(c.out->mu);
        // The framing is lost (or the request never came whole): answer and close.
        c.out->framing = {11, false, false};
        c.out->started = c.out->complete = c.out->close_after = true;
        c.out->buf += serialize(cfg_.make_error(status, message), c.out->framing);
    }
    flush(c);
}

void Transport::flush(Connection& c) {
    Outbox& o = *c.out;
    bool failed = false, answered = false, close_after = false;
    {
        std::lock_guard lk(o.mu);
        if (!c.pending && o.unsent() > 0) c.progress = Clock::now();
        while (o.unsent() > 0) {
            const ssize_t n =
                ::send(c.fd, o.buf.data() + o.sent, o.unsent(), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                o.sent += static_cast<size_t>(n);
                c.progress = Clock::now();
            } else if (n < 0 && errno == EINTR) {
                continue;
            } else {
                failed = !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
                break;
            }
        }
        if (o.unsent() == 0) {
            o.buf.clear();
            o.sent = 0;
        } else if (o.sent > (64u << 10) && o.sent > o.buf.size() / 2) {
            o.buf.erase(0, o.sent);
            o.sent = 0;
        }
        c.pending = o.unsent() > 0;
        answered = o.complete && !c.pending;
        close_after = o.close_after;
    }
    o.room.notify_all();
    if (failed) {
        close(c);
    } else if (c.state == Connection::State::Busy && answered) {
        if (close_after || stop_accepting_)
            begin_close(c);
        else
            next_request(c);
    } else if (c.state == Connection::State::Busy) {
        set_interest(c, EPOLLRDHUP | (c.pending ? EPOLLOUT : 0u));
    } else if (c.state == Connection::State::Reading) {
        set_interest(c, EPOLLIN | EPOLLRDHUP | (c.pending ? EPOLLOUT : 0u));
    }
}

void Transport::next_request(Connection& c) {
    set_busy(c, false);
    c.out = std::make_shared<Outbox>(c.id, static_cast<Waker*>(this), cfg_.max_buffered);
    c.state = Connection::State::Reading;
    c.continue_sent = false;
    c.deadline = Clock::now() + secs(cfg_.idle_timeout_s);
    set_interest(c, EPOLLIN | EPOLLRDHUP);
    if (!c.in.empty()) parse_queue_.push_back(c.id);  // already received: parsed this iteration
}

void Transport::begin_close(Connection& c) {
    set_busy(c, false);
    ::shutdown(c.fd, SHUT_WR);
    if (c.peer_closed) {
        close(c);
        return;
    }
    c.state = Connection::State::Lingering;
    c.in.clear();
    c.deadline = Clock::now() + secs(cfg_.linger_s);
    set_interest(c, EPOLLIN | EPOLLRDHUP);
}

void Transport::close(Connection& c) {
    if (c.fd < 0) return;
    c.out->gone = true;
    {
        std::lock_guard lk(c.out->mu);  // a writer between its check and its wait sees it
    }
    c.out->room.notify_all();
    ::close(c.fd);  // also leaves the epoll set
    c.fd = -1;
    set_busy(c, false);
    dead_.push_back(c.id);
    --open_;
    std::lock_guard lk(stats_mu_);
    stats_.connections = open_;
}

void Transport::check_deadlines() {
    const auto now = Clock::now();
    for (auto& [id, owned] : conns_) {
        Connection& c = *owned;
        if (c.fd < 0) continue;
        switch (c.state) {
            case Connection::State::Reading:
                if (now < c.deadline) break;
                if (c.parser.started()) {
                    {
                        std::lock_guard lk(stats_mu_);
                        ++stats_.timeouts;
                    }
                    respond_error(c, 408,
                                  "The request was not received whole within " +
                                      seconds_text(cfg_.request_timeout_s) + " s");
                } else {
                    close(c);  // idle: nothing to answer
                }
                break;
            case Connection::State::Busy:
                if (c.pending && now - c.progress > secs(cfg_.write_timeout_s)) {
                    {
                        std::lock_guard lk(stats_mu_);
                        ++stats_.write_timeouts;
                    }
                    close(c);
                }
                break;
            case Connection::State::Lingering:
                if (now >= c.deadline) close(c);
                break;
        }
    }
}

}  // namespace syslm::serve::http
