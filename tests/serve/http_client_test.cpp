// The edge's HTTP client (serve/http_client.hpp) against syslm's own transport on 127.0.0.1:
// bodies both ways, chunked answers, the kept-alive connection reused and reopened after the
// server closed it idle, the total deadline on a slow answer, a stream cut mid-body, refused
// connections and bad URLs, each an HttpClientError saying what happened.
#include "serve/http_client.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "serve/cloud_link.hpp"
#include "serve/http_transport.hpp"

namespace syslm::serve::http {
namespace {

using serve::CloudLink;
using serve::LinkProfile;
using serve::LinkStats;
using serve::parse_link;

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Cloud {
    std::unique_ptr<Transport> t;
    std::atomic<int> requests{0};
    Cloud() {
        TransportConfig cfg;
        cfg.workers = 2;
        cfg.idle_timeout_s = 0.3;
        Router r;
        r.add("POST", "/echo", Run::Worker, [this](const Request& req, Responder& res) {
            ++requests;
            const std::string* k = req.header("x-key");
            res.reply({200, "application/octet-stream", (k ? *k : "") + req.body, {}});
        });
        r.add("POST", "/auth", Run::Worker, [](const Request& req, Responder& res) {
            const std::string* a = req.header("authorization");
            res.reply({200, "text/plain", a ? *a : "none", {}});
        });
        r.add("GET", "/chunks", Run::Worker, [](const Request&, Responder& res) {
            res.start_stream({200, "text/plain", "", {}});
            for (int i = 0; i < 4; ++i)
                res.write(std::string(3000 + i, static_cast<char>('a' + i)));
            res.end();
        });
        r.add("GET", "/slow", Run::Worker, [](const Request&, Responder& res) {
            std::this_thread::sleep_for(std::chrono::milliseconds(800));
            res.reply({200, "text/plain", "late", {}});
        });
        r.add("GET", "/cut", Run::Worker, [](const Request&, Responder& res) {
            res.start_stream({200, "text/plain", "", {}});
            res.write("partial");
            throw std::runtime_error("the cloud died mid-stream");
        });
        t = std::make_unique<Transport>(cfg, std::move(r));
        t->start();
    }
    ~Cloud() { t->stop(0); }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(t->port()); }
};

TEST(HttpClient, BodiesBothWaysOnAKeptAliveConnection) {
    Cloud cloud;
    HttpClient c(cloud.url());
    std::string body(200000, '\0');
    for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 7);
    ClientResponse r =
        c.request("POST", "/echo", body, "application/octet-stream", 5, {{"X-Key", "k:"}});
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "k:" + body);
    ASSERT_TRUE(r.header("content-type"));
    EXPECT_EQ(*r.header("content-type"), "application/octet-stream");
    r = c.request("GET", "/chunks", "", "", 5);
    ASSERT_EQ(r.body.size(), 3000u + 3001 + 3002 + 3003);
    EXPECT_EQ(r.body[3000], 'b');
    EXPECT_EQ(r.body.back(), 'd');
    // the server closes the idle connection; the next call reconnects by itself
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    r = c.request("POST", "/echo", "again", "text/plain", 5);
    EXPECT_EQ(r.body, "again");
    EXPECT_EQ(cloud.requests.load(), 2);
}

TEST(HttpClient, ASlowAnswerTimesOutWithinTheDeadline) {
    Cloud cloud;
    HttpClient c(cloud.url());
    const auto t0 = Clock::now();
    try {
        c.request("GET", "/slow", "", "", 0.2);
        FAIL() << "no timeout";
    } catch (const HttpClientError& e) {
        EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("/slow"), std::string::npos) << e.what();
    }
    EXPECT_LT(since(t0), 0.6);
    EXPECT_EQ(c.request("POST", "/echo", "after", "", 5).body, "after");  // a fresh connection
}

TEST(HttpClient, FailuresSayWhatHappened) {
    Cloud cloud;
    HttpClient c(cloud.url());
    try {
        c.request("GET", "/cut", "", "", 5);
        FAIL() << "a cut stream read as whole";
    } catch (const HttpClientError& e) {
        EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos) << e.what();
    }
    const int port = cloud.t->port();
    cloud.t->stop(0);
    HttpClient gone("http://127.0.0.1:" + std::to_string(port));
    try {
        gone.request("GET", "/x", "", "", 2);
        FAIL() << "connected to a stopped server";
    } catch (const HttpClientError& e) {
        EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
    }
    EXPECT_THROW(HttpClient("https://host:1"), HttpClientError);
    EXPECT_THROW(HttpClient("http://host"), HttpClientError);
    EXPECT_THROW(HttpClient("http://host:99999"), HttpClientError);
    EXPECT_EQ(HttpClient("http://[::1]:8080/v1").host(), "::1");
}

TEST(CloudLink, LinkSpecsAreParsedAndBadOnesNamed) {
    LinkProfile p = parse_link("20mbit,30ms");
    EXPECT_DOUBLE_EQ(p.bits_per_s, 2e7);
    EXPECT_DOUBLE_EQ(p.rtt_s, 0.03);
    p = parse_link("512kbit,2.5ms");
    EXPECT_DOUBLE_EQ(p.bits_per_s, 512e3);
    EXPECT_DOUBLE_EQ(p.rtt_s, 0.0025);
    p = parse_link("0,1s");
    EXPECT_EQ(p.bits_per_s, 0);
    EXPECT_DOUBLE_EQ(p.added_seconds(1000, 1000), 1.0);
    EXPECT_DOUBLE_EQ(parse_link("1gbit,0us").added_seconds(1250, 0), 1e-5);
    for (const char* bad :
         {"20mbit", "20mbit,30ms,1", "20mb,30ms", "-1mbit,3ms", "x,30ms", "20mbit,30"})
        EXPECT_THROW(parse_link(bad), std::exception) << bad;
}

TEST(CloudLink, TheSimulatorAddsTheLinksTimeAndCountsTheBytes) {
    Cloud cloud;
    // 1 Mbit/s and 40 ms: 12,500 bytes up and the same echoed down take 0.1 s each way
    CloudLink link(cloud.url(), parse_link("1mbit,40ms"), "secret", 5);
    const std::string body(12500, 'x');
    const auto t0 = Clock::now();
    const ClientResponse r = link.post("/echo", body, "application/octet-stream");
    const double took = since(t0);
    EXPECT_EQ(r.body, body);
    const double added = link.link().added_seconds(body.size(), body.size());
    EXPECT_NEAR(added, 0.24, 1e-9);
    EXPECT_GE(took, added);
    EXPECT_LT(took, added + 0.5);
    const LinkStats s = link.stats();
    EXPECT_EQ(s.calls, 1);
    EXPECT_EQ(s.failures, 0);
    EXPECT_EQ(s.bytes_up, 12500);
    EXPECT_EQ(s.bytes_down, 12500);
    EXPECT_NEAR(s.simulated_seconds, added, 1e-9);
    EXPECT_EQ(link.post("/auth", "", "").body, "Bearer secret");
    // a deadline the simulated link alone passes fails at once, counted
    CloudLink slow(cloud.url(), parse_link("0,2s"), "", 0.5);
    EXPECT_THROW(slow.post("/echo", "x", ""), HttpClientError);
    EXPECT_EQ(slow.stats().failures, 1);
}

}  // namespace
}  // namespace syslm::serve::http
