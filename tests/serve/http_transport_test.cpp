// The HTTP transport over real sockets on 127.0.0.1: keep-alive and pipelining, the total
// request deadline (408 for a request trickled a byte at a time), silent and idle connections
// closed, malformed framing answered at once, error responses the client can read although it is
// still sending (lingering close), 503 when no worker is free while inline routes still answer,
// the connection cap, 405 / 404 / HEAD, chunked streams (and raw on HTTP/1.0), 100-continue,
// handlers seeing a client that disconnected or stopped reading, handler errors, and a stop that
// lets the requests in flight finish.
#include "serve/http_transport.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace syslm::serve::http {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Reply {
    int status = 0;
    std::string head, body;
    bool complete = false;  // a whole response was read
    bool closed = false;    // the server closed the connection (EOF or reset)

    std::string header(const std::string& name) const {  // case as the transport writes it
        const size_t at = head.find("\r\n" + name + ": ");
        if (at == std::string::npos) return "";
        const size_t start = at + name.size() + 4;
        return head.substr(start, head.find("\r\n", start) - start);
    }
};

class Client {
public:
    explicit Client(int port, int rcvbuf = 0) {
        fd_ = socket(AF_INET, SOCK_STREAM, 0);
        if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
    }
    ~Client() { close(); }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

    bool send(std::string_view data) {
        while (!data.empty()) {
            const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
            if (n <= 0) return false;
            data.remove_prefix(static_cast<size_t>(n));
        }
        return true;
    }

    // Reads into the buffer until `enough` says so, the peer closes, or the timeout passes.
    template <class Pred>
    bool read_until(Pred enough, double timeout_s) {
        const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
        while (!enough()) {
            const int left = static_cast<int>(
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                    .count());
            if (left <= 0) return false;
            pollfd p{fd_, POLLIN, 0};
            if (poll(&p, 1, left) <= 0) continue;
            char buf[65536];
            const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) {
                eof_ = true;
                return enough();
            }
            buf_.append(buf, static_cast<size_t>(n));
        }
        return true;
    }

    // One response (interim 100 Continue responses are skipped unless `interim`).
    Reply read(double timeout_s = 5, bool interim = false) {
        Reply r;
        while (true) {
            read_until([&] { return buf_.find("\r\n\r\n") != std::string::npos || eof_; },
                       timeout_s);
            const size_t end = buf_.find("\r\n\r\n");
            if (end == std::string::npos) {
                r.closed = eof_;
                return r;
            }
            r.head = buf_.substr(0, end + 2);
            buf_.erase(0, end + 4);
            r.status = std::atoi(r.head.c_str() + 9);
            if (r.status != 100 || interim) break;
        }
        if (r.status == 100) {
            r.complete = true;
            return r;
        }
        if (const std::string len = r.header("Content-Length"); !len.empty()) {
            const size_t n = std::stoul(len);
            if (!head_request_) {
                read_until([&] { return buf_.size() >= n || eof_; }, timeout_s);
                r.complete = buf_.size() >= n;
                r.body = buf_.substr(0, std::min(n, buf_.size()));
                buf_.erase(0, r.body.size());
            } else {
                r.complete = true;
            }
        } else if (r.header("Transfer-Encoding") == "chunked") {
            while (true) {
                read_until([&] { return buf_.find("\r\n") != std::string::npos || eof_; },
                           timeout_s);
                const size_t eol = buf_.find("\r\n");
                if (eol == std::string::npos) break;
                const size_t n = std::stoul(buf_.substr(0, eol), nullptr, 16);
                read_until([&] { return buf_.size() >= eol + 2 + n + 2 || eof_; }, timeout_s);
                if (buf_.size() < eol + 2 + n + 2) break;
                r.body += buf_.substr(eol + 2, n);
                buf_.erase(0, eol + 2 + n + 2);
                if (n == 0) {
                    r.complete = true;
                    break;
                }
            }
        } else {  // until the connection closes
            read_until([&] { return eof_; }, timeout_s);
            r.body = buf_;
            buf_.clear();
            r.complete = eof_;
        }
        r.closed = eof_ || (r.header("Connection") == "close" && wait_closed(timeout_s));
        return r;
    }

    // True when the server closes the connection within the timeout; `extra` gets any bytes.
    bool wait_closed(double timeout_s, std::string* extra = nullptr) {
        read_until([&] { return eof_; }, timeout_s);
        if (extra) *extra = buf_;
        return eof_;
    }

    void expect_head_request() { head_request_ = true; }
    const std::string& buffered() const { return buf_; }
    int fd() const { return fd_; }

private:
    int fd_ = -1;
    std::string buf_;
    bool eof_ = false, head_request_ = false;
};

std::string get(const std::string& path, const std::string& extra = "") {
    return "GET " + path + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}

std::string post(const std::string& path, const std::string& body, const std::string& extra = "") {
    return "POST " + path +
           " HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
           extra + "\r\n" + body;
}

// What the test handlers share with the tests.
struct Control {
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    int blocked = 0;
    bool write_failed = false, gone_seen = false;
    double write_failed_after = 0, gone_after = 0;

    template <class Pred>
    bool wait(Pred p, double timeout_s = 5) {
        std::unique_lock lk(mu);
        return cv.wait_for(lk, std::chrono::duration<double>(timeout_s), p);
    }
};

struct TestServer {
    Control ctl;
    std::unique_ptr<Transport> t;

    explicit TestServer(TransportConfig cfg = {}) {
        Router r;
        r.add("GET", "/fast", Run::Inline, [](const Request&, Responder& res) {
            res.reply({200, "text/plain", "fast", {}});
        });
        r.add("POST", "/echo", Run::Worker, [](const Request& req, Responder& res) {
            res.reply({200, "text/plain", req.body, {}});
        });
        r.add("GET", "/block", Run::Worker, [this](const Request&, Responder& res) {
            {
                std::unique_lock lk(ctl.mu);
                ++ctl.blocked;
                ctl.cv.notify_all();
                ctl.cv.wait(lk, [&] { return ctl.release; });
            }
            res.reply({200, "text/plain", "released", {}});
        });
        r.add("GET", "/stream", Run::Worker, [](const Request&, Responder& res) {
            res.start_stream({200, "text/plain", "", {}});
            for (int i = 0; i < 5; ++i) EXPECT_TRUE(res.write("piece" + std::to_string(i) + ";"));
            res.end();
        });
        r.add("GET", "/flood", Run::Worker, [this](const Request&, Responder& res) {
            const auto t0 = Clock::now();
            res.start_stream({200, "application/octet-stream", "", {}});
            const std::string piece(64 * 1024, 'x');
            while (since(t0) < 30 && res.write(piece)) {
            }
            std::lock_guard lk(ctl.mu);
            ctl.write_failed = res.client_gone();
            ctl.write_failed_after = since(t0);
            ctl.cv.notify_all();
        });
        r.add("GET", "/until-gone", Run::Worker, [this](const Request&, Responder& res) {
            res.start_stream({200, "text/event-stream", "", {}});
            res.write("data: hello\n\n");
            const auto t0 = Clock::now();
            while (!res.client_gone() && since(t0) < 10)
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            std::lock_guard lk(ctl.mu);
            ctl.gone_seen = res.client_gone();
            ctl.gone_after = since(t0);
            ctl.cv.notify_all();
        });
        r.add("GET", "/throw", Run::Worker,
              [](const Request&, Responder&) { throw std::runtime_error("boom at /throw"); });
        r.add("GET", "/silent", Run::Worker, [](const Request&, Responder&) {});
        t = std::make_unique<Transport>(std::move(cfg), std::move(r));
        t->start();
    }
    ~TestServer() {
        {
            std::lock_guard lk(ctl.mu);
            ctl.release = true;
        }
        ctl.cv.notify_all();
        t->stop(0);
    }
    int port() const { return t->port(); }
};

TransportConfig quick() {
    TransportConfig c;
    c.workers = 2;
    c.request_timeout_s = 0.5;
    c.idle_timeout_s = 0.5;
    c.write_timeout_s = 0.5;
    c.linger_s = 0.5;
    return c;
}

TEST(HttpTransport, AnswersAndKeepsTheConnectionAlive) {
    TestServer s;
    Client c(s.port());
    c.send(get("/fast"));
    Reply r = c.read();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "fast");
    c.send(post("/echo", "hello"));
    r = c.read();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "hello");
    EXPECT_FALSE(r.closed);
    c.send(
        "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n");
    r = c.read();
    EXPECT_EQ(r.body, "abcde");
}

TEST(HttpTransport, PipelinedRequestsAreAnsweredInOrder) {
    TestServer s;
    Client c(s.port());
    c.send(post("/echo", "one") + get("/fast") + post("/echo", "three", "Connection: close\r\n"));
    EXPECT_EQ(c.read().body, "one");
    EXPECT_EQ(c.read().body, "fast");
    const Reply r = c.read();
    EXPECT_EQ(r.body, "three");
    EXPECT_TRUE(r.closed);
}

TEST(HttpTransport, RequestDeadlineIsATotalNotPerRead) {
    TestServer s(quick());
    Client c(s.port());
    const auto t0 = Clock::now();
    const std::string head =
        "GET /fast HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    std::string extra;
    // A byte every 50 ms: never idle for long, never complete.
    for (size_t i = 0; i < head.size() && since(t0) < 3; ++i) {
        if (!c.send(head.substr(i, 1))) break;
        pollfd p{c.fd(), POLLIN, 0};
        if (poll(&p, 1, 50) > 0) break;  // the server answered
    }
    const Reply r = c.read(5);
    const double took = since(t0);
    EXPECT_EQ(r.status, 408) << r.head;
    EXPECT_NE(r.body.find("not received whole within 0.5 s"), std::string::npos) << r.body;
    EXPECT_TRUE(r.closed);
    EXPECT_GE(took, 0.5);
    EXPECT_LT(took, 3.0);
    EXPECT_EQ(s.t->stats().timeouts, 1);
}

TEST(HttpTransport, PartialBodyTimesOut) {
    TestServer s(quick());
    Client c(s.port());
    c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 500\r\n\r\n0123456789");
    const auto t0 = Clock::now();
    const Reply r = c.read(5);
    EXPECT_EQ(r.status, 408);
    EXPECT_TRUE(r.closed);
    EXPECT_LT(since(t0), 3.0);
}

TEST(HttpTransport, SilentAndIdleConnectionsAreClosedQuietly) {
    TestServer s(quick());
    Client silent(s.port());
    Client idle(s.port());
    idle.send(get("/fast"));
    EXPECT_EQ(idle.read().status, 200);
    std::string extra;
    EXPECT_TRUE(silent.wait_closed(3, &extra));
    EXPECT_EQ(extra, "");  // nothing was asked: nothing is answered
    EXPECT_TRUE(idle.wait_closed(3, &extra));
    EXPECT_EQ(extra, "");
    EXPECT_EQ(s.t->stats().timeouts, 0);
}

TEST(HttpTransport, MalformedContentLengthIsAnsweredAtOnce) {
    TransportConfig cfg;
    cfg.request_timeout_s = 5;  // "at once" is well before the deadline
    TestServer s(cfg);
    for (const char* len : {"-5", "99999999999999999999", "abc"}) {
        Client c(s.port());
        const auto t0 = Clock::now();
        c.send(std::string("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: ") + len +
               "\r\n\r\n{}");
        const Reply r = c.read(5);
        EXPECT_EQ(r.status, 400) << len;
        EXPECT_NE(r.body.find(len), std::string::npos) << r.body;
        EXPECT_EQ(r.header("Connection"), "close");
        EXPECT_TRUE(r.closed);
        EXPECT_LT(since(t0), 1.0) << len;
    }
    EXPECT_EQ(s.t->stats().malformed, 3);
}

TEST(HttpTransport, ErrorReachesAClientStillSendingItsBody) {
    TransportConfig cfg;
    cfg.limits.max_body = 1000;
    TestServer s(cfg);
    Client c(s.port());
    const std::string body(4 << 20, 'b');
    c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n");
    // The server answers 413 from the head alone; the client keeps sending what it promised.
    std::thread sender([&] { c.send(body); });
    const Reply r = c.read(10);
    sender.join();
    EXPECT_EQ(r.status, 413);
    EXPECT_NE(r.body.find("larger than the limit of 1000 bytes"), std::string::npos) << r.body;
}

TEST(HttpTransport, NoFreeWorkerIs503WhileInlineRoutesAnswer) {
    TransportConfig cfg;
    cfg.workers = 1;
    TestServer s(cfg);
    Client holder(s.port());
    holder.send(get("/block"));
    ASSERT_TRUE(s.ctl.wait([&] { return s.ctl.blocked == 1; }));
    Client c(s.port());
    auto t0 = Clock::now();
    c.send(post("/echo", "x"));
    Reply r = c.read(5);
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.header("Retry-After"), "1");
    EXPECT_LT(since(t0), 1.0);
    EXPECT_FALSE(r.closed);  // a refusal, not a broken connection
    t0 = Clock::now();
    c.send(get("/fast"));
    r = c.read(5);
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(since(t0), 1.0);
    {
        std::lock_guard lk(s.ctl.mu);
        s.ctl.release = true;
    }
    s.ctl.cv.notify_all();
    EXPECT_EQ(holder.read().body, "released");
    // The worker is free again once its reply is written, which the client may see a moment
    // before the worker is handed back: a request sent at once may still be refused, and is
    // served on a retry.
    Reply again;
    int64_t refused = 1;
    t0 = Clock::now();
    for (;;) {
        c.send(post("/echo", "again"));
        again = c.read();
        if (again.status != 503 || since(t0) > 5) break;
        ++refused;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(again.body, "again");
    EXPECT_EQ(s.t->stats().busy_refused, refused);
}

TEST(HttpTransport, ConnectionsPastTheCapGet503) {
    TransportConfig cfg;
    cfg.max_connections = 3;
    TestServer s(cfg);
    std::vector<std::unique_ptr<Client>> held;
    for (int i = 0; i < 3; ++i) {
        held.push_back(std::make_unique<Client>(s.port()));
        held.back()->send(get("/fast"));
        EXPECT_EQ(held.back()->read().status, 200);
    }
    Client over(s.port());
    over.send(get("/fast"));
    const Reply r = over.read(5);
    EXPECT_EQ(r.status, 503);
    EXPECT_NE(r.body.find("too many open connections"), std::string::npos) << r.body;
    EXPECT_TRUE(r.closed);
    over.close();
    held.pop_back();  // room again once the server has seen the close
    bool served = false;
    for (int i = 0; i < 50 && !served; ++i) {
        Client again(s.port());
        again.send(get("/fast"));
        served = again.read(5).status == 200;
        if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(served);
}

TEST(HttpTransport, WrongMethodIs405WithAllowUnknownPathIs404AndHeadWorks) {
    TestServer s;
    Client c(s.port());
    c.send("POST /fast HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    Reply r = c.read();
    EXPECT_EQ(r.status, 405);
    EXPECT_EQ(r.header("Allow"), "GET, HEAD");
    c.send(get("/echo"));
    r = c.read();
    EXPECT_EQ(r.status, 405);
    EXPECT_EQ(r.header("Allow"), "POST");
    c.send(get("/nothing"));
    EXPECT_EQ(c.read().status, 404);
    Client h(s.port());
    h.expect_head_request();
    h.send("HEAD /fast HTTP/1.1\r\nHost: t\r\n\r\n");
    r = h.read();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("Content-Length"), "4");
    std::string extra;
    h.send("HEAD /fast HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    h.read();
    EXPECT_TRUE(h.wait_closed(3, &extra));
    EXPECT_EQ(extra, "");  // no body ever came
}

TEST(HttpTransport, StreamsAreChunkedOn11AndRawUntilCloseOn10) {
    TestServer s;
    Client c(s.port());
    c.send(get("/stream"));
    Reply r = c.read();
    EXPECT_EQ(r.header("Transfer-Encoding"), "chunked");
    EXPECT_EQ(r.body, "piece0;piece1;piece2;piece3;piece4;");
    EXPECT_TRUE(r.complete);
    EXPECT_FALSE(r.closed);
    Client old(s.port());
    old.send("GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    r = old.read();
    EXPECT_EQ(r.header("Transfer-Encoding"), "");
    EXPECT_EQ(r.header("Connection"), "close");
    EXPECT_EQ(r.body, "piece0;piece1;piece2;piece3;piece4;");
    EXPECT_TRUE(r.closed);
}

TEST(HttpTransport, ExpectContinueGetsAnInterimAnswer) {
    TestServer s;
    Client c(s.port());
    c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    Reply r = c.read(5, true);
    EXPECT_EQ(r.status, 100);
    c.send("body");
    r = c.read();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "body");
}

TEST(HttpTransport, AHandlerSeesItsClientGone) {
    TestServer s;
    Client c(s.port());
    c.send(get("/until-gone"));
    ASSERT_TRUE(
        c.read_until([&] { return c.buffered().find("data: hello") != std::string::npos; }, 5));
    c.close();
    ASSERT_TRUE(s.ctl.wait([&] { return s.ctl.gone_after > 0; }));
    EXPECT_TRUE(s.ctl.gone_seen);
    EXPECT_LT(s.ctl.gone_after, 2.0);
}

TEST(HttpTransport, AClientThatStopsReadingIsDropped) {
    TransportConfig cfg = quick();
    cfg.max_buffered = 64 * 1024;
    TestServer s(cfg);
    Client c(s.port(), 4096);  // a small window, and it never reads
    c.send(get("/flood"));
    ASSERT_TRUE(s.ctl.wait([&] { return s.ctl.write_failed_after > 0; }, 20));
    EXPECT_TRUE(s.ctl.write_failed);
    EXPECT_LT(s.ctl.write_failed_after, 10.0);
    EXPECT_EQ(s.t->stats().write_timeouts, 1);
}

TEST(HttpTransport, HandlerErrorsAre500) {
    TestServer s;
    Client c(s.port());
    c.send(get("/throw"));
    Reply r = c.read();
    EXPECT_EQ(r.status, 500);
    EXPECT_NE(r.body.find("boom at /throw"), std::string::npos);
    c.send(get("/silent"));
    r = c.read();
    EXPECT_EQ(r.status, 500);
    EXPECT_NE(r.body.find("no response"), std::string::npos);
}

TEST(HttpTransport, StopLetsTheRequestsInFlightFinish) {
    TestServer s;
    Client c(s.port());
    c.send(get("/block"));
    ASSERT_TRUE(s.ctl.wait([&] { return s.ctl.blocked == 1; }));
    std::thread stopper([&] { s.t->stop(10); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    {
        std::lock_guard lk(s.ctl.mu);
        s.ctl.release = true;
    }
    s.ctl.cv.notify_all();
    const Reply r = c.read();
    stopper.join();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "released");
    EXPECT_EQ(r.header("Connection"), "close");  // no keep-alive while stopping
}

}  // namespace
}  // namespace syslm::serve::http
