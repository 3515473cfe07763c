// HTTP/1.x messages: an incremental request parser that is fed bytes as they arrive and stops
// at the end of one request (pipelined bytes stay for the next), and the serialisation of
// responses (whole, with Content-Length, or streamed: chunked on HTTP/1.1, until close on 1.0).
// The parser is strict where leniency is dangerous (framing: Content-Length / Transfer-Encoding,
// bare CR, folded headers) and bounded everywhere (head bytes, header count, body size, chunk
// lines), so a malformed request is refused as soon as the faulty byte arrives with the status
// to answer (400, 413, 414, 417, 431, 501, 505) and a message that says what was wrong.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace syslm::serve::http {

// (name, value) pairs; the parser stores names lowercased.
using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
    std::string method;  // as sent (methods are case-sensitive)
    std::string target;  // the request-target as sent
    std::string path;    // target without the query (an absolute-form target's path)
    std::string query;   // after '?', without it
    int version = 11;    // 10 or 11
    Headers headers;
    std::string body;  // de-chunked
    bool keep_alive = true;
    bool expect_continue = false;  // HTTP/1.1 `Expect: 100-continue`

    // The value of the first header named `lower_name` (lowercase), or nullptr.
    const std::string* header(std::string_view lower_name) const;
};

struct ParserLimits {
    size_t max_head_bytes = 16 * 1024;  // request line + headers (and chunked trailers)
    size_t max_headers = 100;
    size_t max_body = 1 << 20;
};

struct ParseError {
    int status = 0;  // the HTTP status to answer with
    std::string message;
};

class RequestParser {
public:
    enum class Status { NeedMore, Complete, Failed };

    explicit RequestParser(const ParserLimits& limits = {}) : limits_(limits) {}

    // Consumes the bytes of the current request from the front of `in` (whatever follows a
    // complete request is left there). After Complete, take() the request; after Failed,
    // error() says why and the connection must be closed (the framing is lost).
    Status feed(std::string& in);

    // Any byte of a request seen (empty lines before a request count: they start its clock).
    bool started() const { return started_; }
    // The head is complete and the body is still to come: time to answer 100-continue.
    bool awaiting_body() const { return state_ == State::Body || state_ == State::ChunkSize; }
    const Request& request() const { return req_; }  // the head, once parsed
    const ParseError& error() const { return error_; }

    // The complete request; the parser is then ready for the next one.
    Request take();

private:
    enum class State { RequestLine, Headers, Body, ChunkSize, ChunkEnd, Trailers, Done, Failed };

    Status fail(int status, std::string message);
    // Takes the next line (without CR LF / LF) from in[pos..] into `line`; false: incomplete.
    bool next_line(const std::string& in, size_t& pos, std::string_view& line);
    bool head_line(std::string_view line);  // a line of the head or of the trailers
    bool request_line(std::string_view line);
    bool header_line(std::string_view line);
    bool head_done();
    bool chunk_size_line(std::string_view line);

    ParserLimits limits_;
    State state_ = State::RequestLine;
    Request req_;
    ParseError error_;
    bool started_ = false;
    size_t head_bytes_ = 0;   // head (or trailer) bytes consumed so far
    size_t scanned_ = 0;      // bytes of the current partial line already searched for LF
    uint64_t remaining_ = 0;  // body bytes (Content-Length) or chunk bytes still to come
    bool chunked_ = false, has_length_ = false;
    size_t trailers_ = 0;
};

// The reason phrase of a status code ("Not Found"); "Unknown" for codes not listed.
const char* reason_phrase(int status);

struct Response {
    int status = 200;
    std::string content_type;  // empty: no Content-Type
    std::string body;
    Headers headers;  // extra ones (Allow, Retry-After, Cache-Control, ...)
};

// Builds the response for an error the transport or router decides (400, 404, 408, 503, ...):
// the application gives its own body format (the OpenAI error object).
using ErrorResponse = std::function<Response(int status, const std::string& message)>;
// A plain-text one.
Response text_error(int status, const std::string& message);

// How a response is framed for the request it answers.
struct Framing {
    int version = 11;        // the request's HTTP version
    bool keep_alive = true;  // false: `Connection: close`, and the connection is closed after
    bool head_only = false;  // a HEAD request: headers only
};

// A whole response with Content-Length.
std::string serialize(const Response& r, const Framing& f);
// The head of a streamed response; `f.keep_alive` must be false on HTTP/1.0 (no chunked
// encoding there: the body ends when the connection closes).
std::string stream_head(const Response& r, const Framing& f);
// One piece of a streamed body in chunked encoding (empty data: nothing, never the last chunk).
std::string chunk(std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";
inline constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace syslm::serve::http
