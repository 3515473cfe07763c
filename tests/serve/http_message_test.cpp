// The HTTP/1.x request parser on valid requests fed whole, byte by byte and pipelined, and on
// malformed ones of every kind (each refused with its status as soon as the faulty byte is in),
// plus the response serialisation.
#include "serve/http_message.hpp"

#include <gtest/gtest.h>

#include <random>

namespace syslm::serve::http {
namespace {

struct Parsed {
    RequestParser::Status status;
    Request req;
    ParseError error;
    std::string rest;
};

Parsed parse(std::string in, ParserLimits limits = {}) {
    RequestParser p(limits);
    const auto st = p.feed(in);
    Parsed out{st, {}, p.error(), in};
    if (st == RequestParser::Status::Complete) out.req = p.take();
    return out;
}

// Feeds one byte at a time: the result must not depend on how the bytes arrive.
Parsed parse_bytewise(const std::string& data, ParserLimits limits = {}) {
    RequestParser p(limits);
    std::string in;
    for (size_t i = 0; i < data.size(); ++i) {
        in += data[i];
        const auto st = p.feed(in);
        if (st != RequestParser::Status::NeedMore) {
            Parsed out{st, {}, p.error(), in + data.substr(i + 1)};
            if (st == RequestParser::Status::Complete) out.req = p.take();
            return out;
        }
    }
    return {RequestParser::Status::NeedMore, {}, {}, in};
}

TEST(HttpParser, SimpleGet) {
    const Parsed p = parse("GET /v1/models?x=1&y HTTP/1.1\r\nHost: a\r\nX-Thing:  v a l  \r\n\r\n");
    ASSERT_EQ(p.status, RequestParser::Status::Complete);
    EXPECT_EQ(p.req.method, "GET");
    EXPECT_EQ(p.req.target, "/v1/models?x=1&y");
    EXPECT_EQ(p.req.path, "/v1/models");
    EXPECT_EQ(p.req.query, "x=1&y");
    EXPECT_EQ(p.req.version, 11);
    EXPECT_TRUE(p.req.keep_alive);
    ASSERT_NE(p.req.header("x-thing"), nullptr);
    EXPECT_EQ(*p.req.header("x-thing"), "v a l");  // names lowercased, values trimmed
    EXPECT_EQ(p.req.header("X-Thing"), nullptr);
    EXPECT_TRUE(p.req.body.empty());
    EXPECT_TRUE(p.rest.empty());
}

TEST(HttpParser, KeepAliveRules) {
    EXPECT_FALSE(parse("GET / HTTP/1.0\r\n\r\n").req.keep_alive);
    EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").req.keep_alive);
    EXPECT_FALSE(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").req.keep_alive);
    EXPECT_FALSE(
        parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\n").req.keep_alive);
    EXPECT_TRUE(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n").req.keep_alive);
}

TEST(HttpParser, TargetForms) {
    Parsed p = parse("GET http://example.com:80/health?q HTTP/1.1\r\nHost: a\r\n\r\n");
    ASSERT_EQ(p.status, RequestParser::Status::Complete);
    EXPECT_EQ(p.req.path, "/health");
    EXPECT_EQ(p.req.query, "q");
    p = parse("GET https://example.com HTTP/1.1\r\nHost: a\r\n\r\n");
    EXPECT_EQ(p.req.path, "/");
    p = parse("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n");
    ASSERT_EQ(p.status, RequestParser::Status::Complete);
    EXPECT_EQ(p.req.path, "*");
}

TEST(HttpParser, ContentLengthBody) {
    const std::string req =
        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello worldGET";
    for (const Parsed& p : {parse(req), parse_bytewise(req)}) {
        ASSERT_EQ(p.status, RequestParser::Status::Complete);
        EXPECT_EQ(p.req.body, "hello world");
        EXPECT_EQ(p.rest, "GET");  // the next request's bytes stay
    }
}

TEST(HttpParser, ChunkedBodyWithExtensionsAndTrailers) {
    const std::string req =
        "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"
        "5;name=value\r\nhello\r\n1 \r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
    for (const Parsed& p : {parse(req), parse_bytewise(req)}) {
        ASSERT_EQ(p.status, RequestParser::Status::Complete) << p.error.message;
        EXPECT_EQ(p.req.body, "hello 0123456789");
        EXPECT_EQ(p.rest, "NEXT");
    }
}

TEST(HttpParser, BareLineFeedsAndLeadingEmptyLines) {
    const Parsed p = parse("\r\n\nPOST /x HTTP/1.1\nHost: a\nContent-Length: 2\n\nok");
    ASSERT_EQ(p.status, RequestParser::Status::Complete);
    EXPECT_EQ(p.req.body, "ok");
}

TEST(HttpParser, PipelinedRequestsOneAfterAnother) {
    std::string in =
        "GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: "
        "1\r\n\r\nx"
        "GET /c HTTP/1.0\r\n\r\n";
    RequestParser p;
    std::vector<std::string> paths;
    while (p.feed(in) == RequestParser::Status::Complete) paths.push_back(p.take().path);
    EXPECT_EQ(paths, (std::vector<std::string>{"/a", "/b", "/c"}));
    EXPECT_TRUE(in.empty());
    EXPECT_FALSE(p.started());
}

TEST(HttpParser, ExpectContinueWaitsForTheBody) {
    RequestParser p;
    std::string in =
        "POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n";
    ASSERT_EQ(p.feed(in), RequestParser::Status::NeedMore);
    EXPECT_TRUE(p.awaiting_body());
    EXPECT_TRUE(p.request().expect_continue);
    in = "abc";
    ASSERT_EQ(p.feed(in), RequestParser::Status::Complete);
    EXPECT_EQ(p.take().body, "abc");
    // HTTP/1.0 clients do not wait for 100 Continue.
    EXPECT_FALSE(parse("POST /x HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").req.expect_continue);
}

TEST(HttpParser, EveryPrefixOfAValidRequestNeedsMore) {
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3\r\nabc\r\n0\r\n\r\n";
    for (size_t n = 0; n < req.size(); ++n) {
        RequestParser p;
        std::string in = req.substr(0, n);
        EXPECT_EQ(p.feed(in), RequestParser::Status::NeedMore) << n;
        EXPECT_EQ(p.started(), n > 0);
    }
}

struct Bad {
    const char* what;
    std::string request;
    int status;
};

std::string with_headers(const std::string& headers, const std::string& line = "POST /x HTTP/1.1") {
    return line + "\r\nHost: a\r\n" + headers + "\r\n";
}

TEST(HttpParser, MalformedRequestsAreRefusedWithTheirStatus) {
    ParserLimits limits;
    limits.max_head_bytes = 512;
    limits.max_headers = 10;
    limits.max_body = 1000;
    const std::vector<Bad> cases = {
        {"negative length", with_headers("Content-Length: -5\r\n"), 400},
        {"overflowing length", with_headers("Content-Length: 99999999999999999999\r\n"), 400},
        {"non-numeric length", with_headers("Content-Length: abc\r\n"), 400},
        {"empty length", with_headers("Content-Length:\r\n"), 400},
        {"signed length", with_headers("Content-Length: +5\r\n"), 400},
        {"hex length", with_headers("Content-Length: 0x10\r\n"), 400},
        {"length list", with_headers("Content-Length: 5, 5\r\n"), 400},
        {"two words", with_headers("Content-Length: 5 5\r\n"), 400},
        {"conflicting lengths", with_headers("Content-Length: 5\r\nContent-Length: 6\r\n"), 400},
        {"length and chunked", with_headers("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
         400},
        {"body over the limit", with_headers("Content-Length: 1001\r\n"), 413},
        {"gzip coding", with_headers("Transfer-Encoding: gzip\r\n"), 501},
        {"chunked then gzip", with_headers("Transfer-Encoding: chunked, gzip\r\n"), 501},
        {"two codings", with_headers("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"),
         501},
        {"chunked on 1.0", "POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"chunked over the limit",
         with_headers("Transfer-Encoding: chunked\r\n") + "3e8\r\n" + std::string(1000, 'a') +
             "\r\n1\r\n",
         413},
        {"huge chunk", with_headers("Transfer-Encoding: chunked\r\n") + "fffffffff\r\n", 413},
        {"overflowing chunk",
         with_headers("Transfer-Encoding: chunked\r\n") + "fffffffffffffffffffff\r\n", 400},
        {"bad chunk size", with_headers("Transfer-Encoding: chunked\r\n") + "zz\r\n", 400},
        {"empty chunk size", with_headers("Transfer-Encoding: chunked\r\n") + "\r\n", 400},
        {"chunk longer than its size",
         with_headers("Transfer-Encoding: chunked\r\n") + "2\r\nabc\r\n", 400},
        {"long chunk line",
         with_headers("Transfer-Encoding: chunked\r\n") + "1;" + std::string(2000, 'x'), 400},
        {"malformed trailer", with_headers("Transfer-Encoding: chunked\r\n") + "0\r\nno colon\r\n",
         400},
        {"head too large", with_headers("X-Big: " + std::string(600, 'a') + "\r\n"), 431},
        {"head too large, unterminated", "GET / HTTP/1.1\r\nX: " + std::string(600, 'a'), 431},
        {"too many headers", with_headers([] {
             std::string h;
             for (int i = 0; i < 11; ++i) h += "X-" + std::to_string(i) + ": 1\r\n";
             return h;
         }()),
         431},
        {"request line too long", "GET /" + std::string(600, 'a'), 414},
        {"folded header", with_headers("X-A: 1\r\n  continued\r\n"), 400},
        {"space before colon", with_headers("X-A : 1\r\n"), 400},
        {"no colon", with_headers("X-A 1\r\n"), 400},
        {"empty name", with_headers(": 1\r\n"), 400},
        {"control byte in value", with_headers(std::string("X-A: a\x01") + "b\r\n"), 400},
        {"NUL in value", with_headers(std::string("X-A: a\0b\r\n", 10)), 400},
        {"bare CR in value", with_headers("X-A: a\rb\r\n"), 400},
        {"no version", "GET /\r\n\r\n", 400},
        {"double space", "GET  / HTTP/1.1\r\n\r\n", 400},
        {"extra field", "GET / HTTP/1.1 x\r\n\r\n", 400},
        {"lowercase version", "GET / http/1.1\r\n\r\n", 400},
        {"garbage version", "GET / FOO/1.1\r\n\r\n", 400},
        {"HTTP/2", "GET / HTTP/2.0\r\n\r\n", 505},
        {"HTTP/0.9", "GET / HTTP/0.9\r\n\r\n", 505},
        {"bad method", "G(T / HTTP/1.1\r\n\r\n", 400},
        {"target not a path", "GET health HTTP/1.1\r\n\r\n", 400},
        {"star without OPTIONS", "GET * HTTP/1.1\r\n\r\n", 400},
        {"non-ASCII target", "GET /\xc3\xa9 HTTP/1.1\r\n\r\n", 400},
        {"no Host on 1.1", "GET / HTTP/1.1\r\n\r\n", 400},
        {"two Hosts", with_headers("Host: b\r\n"), 400},
        {"unknown expectation", with_headers("Expect: 200-ok\r\n"), 417},
        {"binary garbage", std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n", 13),
         400},
    };
    for (const Bad& b : cases) {
        for (const Parsed& p : {parse(b.request, limits), parse_bytewise(b.request, limits)}) {
            EXPECT_EQ(p.status, RequestParser::Status::Failed) << b.what;
            EXPECT_EQ(p.error.status, b.status) << b.what << ": " << p.error.message;
            EXPECT_FALSE(p.error.message.empty()) << b.what;
        }
    }
}

TEST(HttpParser, ContentLengthIsRefusedAsSoonAsItsLineArrives) {
    // No end of headers yet: the length line alone is enough to answer 400.
    RequestParser p;
    std::string in = "POST /x HTTP/1.1\r\nContent-Length: -5\r\n";
    EXPECT_EQ(p.feed(in), RequestParser::Status::Failed);
    EXPECT_EQ(p.error().status, 400);
    EXPECT_NE(p.error().message.find("'-5'"), std::string::npos) << p.error().message;
    std::string more = "whatever";
    EXPECT_EQ(p.feed(more), RequestParser::Status::Failed);  // stays failed
}

TEST(HttpParser, EqualDuplicateLengthsAreAccepted) {
    const Parsed p = parse(with_headers("Content-Length: 2\r\nContent-Length: 2\r\n") + "ok");
    ASSERT_EQ(p.status, RequestParser::Status::Complete);
    EXPECT_EQ(p.req.body, "ok");
}

TEST(HttpParser, RandomBytesNeverCrashAndStayBounded) {
    std::mt19937 rng(7);
    ParserLimits limits;
    limits.max_head_bytes = 256;
    limits.max_body = 256;
    const std::string alphabet =
        "GETPOS /HTP1.0\r\n:0123456789abcdefxContent-LngthTrasfr-Ecodigchuk;";
    for (int iter = 0; iter < 2000; ++iter) {
        RequestParser p(limits);
        std::string in;
        size_t fed = 0;
        RequestParser::Status st = RequestParser::Status::NeedMore;
        while (fed < 4096 && st == RequestParser::Status::NeedMore) {
            const size_t n = 1 + rng() % 40;
            for (size_t i = 0; i < n; ++i)
                in += rng() % 4 ? alphabet[rng() % alphabet.size()] : static_cast<char>(rng());
            fed += n;
            st = p.feed(in);
            // Unparsed bytes never pile up beyond the limits.
            EXPECT_LE(in.size(), limits.max_head_bytes + 1100);
        }
        if (st == RequestParser::Status::Failed) {
            EXPECT_GE(p.error().status, 400);
            EXPECT_LT(p.error().status, 600);
        }
    }
}

TEST(HttpResponse, Serialisation) {
    Response r{404, "application/json", "{}", {{"Allow", "GET"}}};
    std::string s = serialize(r, {11, true, false});
    EXPECT_EQ(s.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << s;
    EXPECT_NE(s.find("\r\nContent-Type: application/json\r\n"), std::string::npos);
    EXPECT_NE(s.find("\r\nAllow: GET\r\n"), std::string::npos);
    EXPECT_NE(s.find("\r\nDate: "), std::string::npos);
    EXPECT_EQ(s.find("Connection:"), std::string::npos);  // 1.1 keeps alive by default
    EXPECT_TRUE(s.ends_with("\r\nContent-Length: 2\r\n\r\n{}")) << s;

    s = serialize(r, {10, true, false});
    EXPECT_NE(s.find("\r\nConnection: keep-alive\r\n"), std::string::npos);
    s = serialize(r, {11, false, true});  // HEAD: the length of the body, not the body
    EXPECT_NE(s.find("\r\nConnection: close\r\n"), std::string::npos);
    EXPECT_TRUE(s.ends_with("\r\nContent-Length: 2\r\n\r\n")) << s;

    s = stream_head({200, "text/event-stream", "", {}}, {11, true, false});
    EXPECT_NE(s.find("\r\nTransfer-Encoding: chunked\r\n\r\n"), std::string::npos);
    s = stream_head({200, "text/event-stream", "", {}}, {10, false, false});
    EXPECT_EQ(s.find("Transfer-Encoding"), std::string::npos);
    EXPECT_NE(s.find("\r\nConnection: close\r\n"), std::string::npos);

    EXPECT_EQ(chunk("hello, world!!!!!"), "11\r\nhello, world!!!!!\r\n");
    EXPECT_EQ(chunk(""), "");
    EXPECT_STREQ(reason_phrase(431), "Request Header Fields Too Large");
}

}  // namespace
}  // namespace syslm::serve::http
