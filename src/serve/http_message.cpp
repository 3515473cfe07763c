#include "serve/http_message.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>

namespace syslm::serve::http {

namespace {

constexpr size_t kMaxChunkLine = 1024;  // chunk size + extensions

bool is_tchar(unsigned char c) {  // RFC 9110 token characters
    if (c >= '0' && c <= '9') return true;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
    return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return is_tchar(static_cast<unsigned char>(c));
    });
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + ('a' - 'A'));
    return out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// For error messages: at most 60 characters, control bytes escaped.
std::string quoted(std::string_view s) {
    std::string out = "'";
    for (size_t i = 0; i < s.size() && i < 60; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    if (s.size() > 60) out += "...";
    return out + "'";
}

// Calls f on each comma-separated element of a header value, trimmed and lowercased.
template <class F>
void for_each_token(std::string_view value, F f) {
    while (!value.empty()) {
        const size_t comma = value.find(',');
        const std::string_view item = trim(value.substr(0, comma));
        if (!item.empty()) f(lower(item));
        if (comma == std::string_view::npos) break;
        value.remove_prefix(comma + 1);
    }
}

}  // namespace

const std::string* Request::header(std::string_view lower_name) const {
    for (const auto& [name, value] : headers)
        if (name == lower_name) return &value;
    return nullptr;
}

RequestParser::Status RequestParser::fail(int status, std::string message) {
    state_ = State::Failed;
    error_ = {status, std::move(message)};
    return Status::Failed;
}

bool RequestParser::next_line(const std::string& in, size_t& pos, std::string_view& line) {
    const size_t lf = in.find('\n', pos + scanned_);
    if (lf == std::string::npos) {
        scanned_ = in.size() - pos;
        return false;
    }
    size_t end = lf;
    if (end > pos && in[end - 1] == '\r') --end;  // CR LF, or a bare LF (RFC 9112 2.2)
    line = std::string_view(in).substr(pos, end - pos);
    pos = lf + 1;
    scanned_ = 0;
    return true;
}

RequestParser::Status RequestParser::feed(std::string& in) {
    if (state_ == State::Failed) return Status::Failed;
    if (state_ == State::Done) return Status::Complete;
    size_t pos = 0;
    auto done = [&](Status s) {
        in.erase(0, pos);
        return s;
    };
    if (!in.empty()) started_ = true;
    while (true) {
        std::string_view line;
        switch (state_) {
            case State::RequestLine:
            case State::Headers:
            case State::Trailers: {
                const size_t before = pos;
                const bool whole = next_line(in, pos, line);
                const size_t bytes = whole ? pos - before : in.size() - pos;
                if (head_bytes_ + bytes > limits_.max_head_bytes) {
                    const std::string limit = std::to_string(limits_.max_head_bytes) + " bytes";
                    return done(state_ == State::RequestLine
                                    ? fail(414, "the request line is longer than " + limit)
                                    : fail(431, "the request headers are larger than " + limit));
                }
                if (!whole) return done(Status::NeedMore);
                head_bytes_ += bytes;
                if (!head_line(line)) return done(Status::Failed);
                break;
            }
            case State::Body: {
                const size_t n = static_cast<size_t>(
                    std::min<uint64_t>(remaining_, static_cast<uint64_t>(in.size() - pos)));
                req_.body.append(in, pos, n);
                pos += n;
                remaining_ -= n;
                if (remaining_ > 0) return done(Status::NeedMore);
                state_ = chunked_ ? State::ChunkEnd : State::Done;
                break;
            }
            case State::ChunkSize: {
                const size_t before = pos;
                const bool whole = next_line(in, pos, line);
                if ((whole ? pos - before : in.size() - pos) > kMaxChunkLine + 2)
                    return done(fail(400, "a chunk size line is longer than " +
                                              std::to_string(kMaxChunkLine) + " bytes"));
                if (!whole) return done(Status::NeedMore);
                if (!chunk_size_line(line)) return done(Status::Failed);
                break;
            }
            case State::ChunkEnd: {
                if (!next_line(in, pos, line)) {
                    if (in.size() - pos <= 2) return done(Status::NeedMore);
                    return done(fail(400, "chunk data longer than its chunk size"));
                }
                if (!line.empty()) return done(fail(400, "chunk data longer than its chunk size"));
                state_ = State::ChunkSize;
                break;
            }
            case State::Done:
                return done(Status::Complete);
            case State::Failed:
                return done(Status::Failed);
        }
    }
}

bool RequestParser::head_line(std::string_view line) {
    switch (state_) {
        case State::RequestLine:
            if (line.empty()) return true;  // empty lines before a request are ignored
            if (!request_line(line)) return false;
            state_ = State::Headers;
            return true;
        case State::Headers:
            return line.empty() ? head_done() : header_line(line);
        default:  // trailers: checked like header fields, then dropped
            if (line.empty()) {
                state_ = State::Done;
                return true;
            }
            if (line.front() == ' ' || line.front() == '\t' ||
                line.find(':') == std::string_view::npos ||
                !is_token(line.substr(0, line.find(':')))) {
                fail(400, "malformed trailer field " + quoted(line));
                return false;
            }
            if (++trailers_ + req_.headers.size() > limits_.max_headers) {
                fail(431, "more than " + std::to_string(limits_.max_headers) +
                              " header and trailer fields");
                return false;
            }
            return true;
    }
}

bool RequestParser::request_line(std::string_view line) {
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
        fail(400, "malformed request line " + quoted(line) + " (expected 'METHOD /path HTTP/1.1')");
        return false;
    }
    const std::string_view method = line.substr(0, sp1);
    const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view version = line.substr(sp2 + 1);
    if (!is_token(method)) {
        fail(400, "invalid method " + quoted(method));
        return false;
    }
    if (target.empty() ||
        !std::all_of(target.begin(), target.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
        fail(400, "invalid request target " + quoted(target));
        return false;
    }
    if (version == "HTTP/1.1") {
        req_.version = 11;
    } else if (version == "HTTP/1.0") {
        req_.version = 10;
    } else if (version.size() == 8 && version.substr(0, 5) == "HTTP/" && version[6] == '.' &&
               std::isdigit(static_cast<unsigned char>(version[5])) &&
               std::isdigit(static_cast<unsigned char>(version[7]))) {
        fail(505, "HTTP version " + std::string(version.substr(5)) +
                      " is not supported (1.0 and 1.1 are)");
        return false;
    } else {
        fail(400, "malformed HTTP version " + quoted(version));
        return false;
    }
    req_.method = std::string(method);
    req_.target = std::string(target);
    std::string_view path = target;
    if (target.front() != '/') {
        const std::string low = lower(target.substr(0, 8));
        const size_t scheme = low.rfind("http://", 0) == 0    ? 7
                              : low.rfind("https://", 0) == 0 ? 8
                                                              : 0;
        if (scheme > 0) {  // absolute form: the path after the authority
            const size_t slash = target.find_first_of("/?", scheme);
            path = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
            if (path.front() == '?') {
                req_.path = "/";
                req_.query = std::string(path.substr(1));
                return true;
            }
        } else if (target != "*" || method != "OPTIONS") {
            fail(400, "invalid request target " + quoted(target) + " (expected a path)");
            return false;
        }
    }
    const size_t q = path.find('?');
    req_.path = std::string(path.substr(0, q));
    if (q != std::string_view::npos) req_.query = std::string(path.substr(q + 1));
    return true;
}

bool RequestParser::header_line(std::string_view line) {
    if (line.front() == ' ' || line.front() == '\t') {
        fail(400, "folded header line " + quoted(line) + " (obsolete line folding is refused)");
        return false;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
        fail(400, "malformed header line " + quoted(line) + " (expected 'Name: value')");
        return false;
    }
    if (req_.headers.size() >= limits_.max_headers) {
        fail(431, "more than " + std::to_string(limits_.max_headers) + " header fields");
        return false;
    }
    std::string name = lower(line.substr(0, colon));
    const std::string_view value = trim(line.substr(colon + 1));
    for (char c : value) {
        const auto u = static_cast<unsigned char>(c);
        if ((u < 0x20 && u != '\t') || u == 0x7f) {
            fail(400, "control character in the value of header '" + name + "'");
            return false;
        }
    }
    if (name == "content-length") {
        // 1*DIGIT and nothing else: no sign, no spaces, no list; overflow is malformed too.
        uint64_t n = 0;
        bool ok = !value.empty();
        for (char c : value) {
            if (c < '0' || c > '9' || n > (UINT64_MAX - 9) / 10) {
                ok = false;
                break;
            }
            n = n * 10 + static_cast<uint64_t>(c - '0');
        }
        if (!ok) {
            fail(400, "invalid Content-Length " + quoted(value) +
                          " (expected a non-negative decimal byte count)");
            return false;
        }
        if (has_length_ && n != remaining_) {
            fail(400, "conflicting Content-Length headers");
            return false;
        }
        has_length_ = true;
        remaining_ = n;
    } else if (name == "host" && req_.header("host")) {
        fail(400, "more than one Host header");
        return false;
    }
    req_.headers.emplace_back(std::move(name), std::string(value));
    return true;
}

bool RequestParser::head_done() {
    Request& r = req_;
    if (r.version == 11 && !r.header("host")) {
        fail(400, "HTTP/1.1 request without a Host header");
        return false;
    }
    bool close = false, keep_alive = false, has_te = false;
    std::string te;
    for (const auto& [name, value] : r.headers) {
        if (name == "connection") {
            for_each_token(value, [&](const std::string& t) {
                close |= t == "close";
                keep_alive |= t == "keep-alive";
            });
        } else if (name == "expect") {
            if (lower(value) != "100-continue") {
                fail(417, "Expect " + quoted(value) + " is not supported (only 100-continue)");
                return false;
            }
            r.expect_continue = r.version == 11;
        } else if (name == "transfer-encoding") {
            te += (has_te ? ", " : "") + value;
            has_te = true;
        }
    }
    r.keep_alive = !close && (r.version == 11 || keep_alive);
    if (has_te) {
        if (r.version == 10) {
            fail(400, "Transfer-Encoding in an HTTP/1.0 request");
            return false;
        }
        if (has_length_) {  // the classic request-smuggling ambiguity: refuse it
            fail(400, "both Content-Length and Transfer-Encoding");
            return false;
        }
        if (lower(trim(te)) != "chunked") {
            fail(501, "Transfer-Encoding " + quoted(te) + " is not supported (only chunked)");
            return false;
        }
        chunked_ = true;
        state_ = State::ChunkSize;
        return true;
    }
    if (has_length_ && remaining_ > limits_.max_body) {
        fail(413, "the request body (" + std::to_string(remaining_) +
                      " bytes) is larger than the limit of " + std::to_string(limits_.max_body) +
                      " bytes");
        return false;
    }
    state_ = has_length_ && remaining_ > 0 ? State::Body : State::Done;
    return true;
}

bool RequestParser::chunk_size_line(std::string_view line) {
    const std::string_view size = trim(line.substr(0, line.find(';')));
    uint64_t n = 0;
    bool ok = !size.empty();
    for (char c : size) {
        int d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (c | 0x20) - 'a' + 10;
        if (d < 0 || n > (UINT64_MAX >> 4)) {
            ok = false;
            break;
        }
        n = (n << 4) | static_cast<uint64_t>(d);
    }
    if (!ok) {
        fail(400, "invalid chunk size " + quoted(line));
        return false;
    }
    if (n > limits_.max_body - req_.body.size()) {
        fail(413, "the request body is larger than the limit of " +
                      std::to_string(limits_.max_body) + " bytes");
        return false;
    }
    if (n == 0) {
        state_ = State::Trailers;
        head_bytes_ = 0;  // trailers get their own head budget
    } else {
        remaining_ = n;
        state_ = State::Body;
    }
    return true;
}

Request RequestParser::take() {
    Request r = std::move(req_);
    req_ = Request{};
    state_ = State::RequestLine;
    error_ = {};
    started_ = false;
    head_bytes_ = scanned_ = 0;
    remaining_ = 0;
    chunked_ = has_length_ = false;
    trailers_ = 0;
    return r;
}

const char* reason_phrase(int status) {
    static constexpr std::pair<int, const char*> kPhrases[] = {
        {100, "Continue"},
        {200, "OK"},
        {400, "Bad Request"},
        {401, "Unauthorized"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {408, "Request Timeout"},
        {413, "Content Too Large"},
        {414, "URI Too Long"},
        {417, "Expectation Failed"},
        {429, "Too Many Requests"},
        {431, "Request Header Fields Too Large"},
        {500, "Internal Server Error"},
        {501, "Not Implemented"},
        {503, "Service Unavailable"},
        {505, "HTTP Version Not Supported"},
    };
    for (const auto& [code, phrase] : kPhrases)
        if (code == status) return phrase;
    return "Unknown";
}

Response text_error(int status, const std::string& message) {
    return {status, "text/plain; charset=utf-8", message + "\n", {}};
}

namespace {

std::string head(const Response& r, const Framing& f) {
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) +
                      "\r\nDate: " + date + "\r\n";
    if (!r.content_type.empty()) out += "Content-Type: " + r.content_type + "\r\n";
    for (const auto& [name, value] : r.headers) out += name + ": " + value + "\r\n";
    if (!f.keep_alive)
        out += "Connection: close\r\n";
    else if (f.version == 10)
        out += "Connection: keep-alive\r\n";
    return out;
}

}  // namespace

std::string serialize(const Response& r, const Framing& f) {
    std::string out = head(r, f);
    out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n\r\n";
    if (!f.head_only) out += r.body;
    return out;
}

std::string stream_head(const Response& r, const Framing& f) {
    std::string out = head(r, f);
    if (f.version == 11) out += "Transfer-Encoding: chunked\r\n";
    return out + "\r\n";
}

std::string chunk(std::string_view data) {
    if (data.empty()) return {};
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string out = size;
    out.append(data);
    out += "\r\n";
    return out;
}

}  // namespace syslm::serve::http
