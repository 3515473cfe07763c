#include "serve/http_client.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace syslm::serve::http {

namespace {

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
        s.remove_suffix(1);
    return std::string(s);
}

// Waits until fd is ready for `events` or the deadline passes (false).
bool wait_for(int fd, short events, double deadline) {
    for (;;) {
        const double left = deadline - now();
        if (left <= 0) return false;
        pollfd p{fd, events, 0};
        const int r = poll(&p, 1, static_cast<int>(std::min(left * 1000 + 1, 1e9)));
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return false;
    }
}

}  // namespace

const std::string* ClientResponse::header(std::string_view lower_name) const {
    for (const auto& [k, v] : headers)
        if (k == lower_name) return &v;
    return nullptr;
}

HttpClient::HttpClient(const std::string& url) {
    const std::string scheme = "http://";
    if (url.compare(0, scheme.size(), scheme) != 0)
        throw HttpClientError("'" + url + "': expected http://HOST:PORT");
    std::string rest = url.substr(scheme.size());
    rest = rest.substr(0, rest.find('/'));
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0)
        throw HttpClientError("'" + url + "': expected http://HOST:PORT");
    host_ = rest.substr(0, colon);
    if (host_.size() > 2 && host_.front() == '[' && host_.back() == ']')
        host_ = host_.substr(1, host_.size() - 2);
    char* end = nullptr;
    const long port = std::strtol(rest.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535)
        throw HttpClientError("'" + url + "': the port is not a number in 1..65535");
    port_ = static_cast<int>(port);
}

HttpClient::~HttpClient() {
    close_connection();
}

void HttpClient::close_connection() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    in_.clear();
}

void HttpClient::connect_by(double deadline) {
    const std::string where = host_ + ":" + std::to_string(port_);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (const int e = getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res))
        throw HttpClientError(where + ": " + gai_strerror(e));
    std::string why = "no address";
    for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
        if (r < 0 && errno == EINPROGRESS) {
            if (!wait_for(fd, POLLOUT, deadline)) {
                ::close(fd);
                why = "connect timed out";
                break;
            }
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            r = err ? -1 : 0;
            errno = err;
        }
        if (r == 0) {
            fd_ = fd;
        } else {
            why = std::strerror(errno);
            ::close(fd);
        }
    }
    freeaddrinfo(res);
    if (fd_ < 0) throw HttpClientError(where + ": cannot connect: " + why);
}

void HttpClient::send_all(std::string_view bytes, double deadline) {
    while (!bytes.empty()) {
        const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n > 0) {
            bytes.remove_prefix(static_cast<size_t>(n));
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (!wait_for(fd_, POLLOUT, deadline)) throw HttpClientError("sending timed out");
        } else {
            throw HttpClientError(std::string("send failed: ") + std::strerror(errno));
        }
    }
}

bool HttpClient::read_some(double deadline) {
    char buf[16384];
    for (;;) {
        const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n > 0) {
            in_.append(buf, static_cast<size_t>(n));
            return true;
        }
        if (n == 0) return false;
        if (errno == EINTR) continue;
        if (errno != EAGAIN)
            throw HttpClientError(std::string("recv failed: ") + std::strerror(errno));
        if (!wait_for(fd_, POLLIN, deadline)) throw HttpClientError("the answer timed out");
    }
}

// The status line and headers of `head` (without its blank line); HTTP/1.1 keeps alive unless
// it says `Connection: close`.
static ClientResponse parse_head(const std::string& head, bool& keep_alive) {
    ClientResponse r;
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.compare(0, 5, "HTTP/") != 0 || status_line.size() < 12)
        throw HttpClientError("malformed status line '" + status_line + "'");
    r.status = std::atoi(status_line.c_str() + 9);
    keep_alive = status_line.compare(0, 8, "HTTP/1.1") == 0;
    while (line_end != std::string::npos) {
        const size_t next = head.find("\r\n", line_end + 2);
        const std::string line = head.substr(line_end + 2, next - line_end - 2);
        line_end = next;
        const size_t colon = line.find(':');
        if (colon == std::string::npos) throw HttpClientError("malformed header '" + line + "'");
        r.headers.emplace_back(lower(line.substr(0, colon)), trim(line.substr(colon + 1)));
    }
    if (const std::string* c = r.header("connection"); c && lower(*c) == "close")
        keep_alive = false;
    return r;
}

ClientResponse HttpClient::read_response(double deadline, bool& keep_alive) {
    size_t head_end;
    while ((head_end = in_.find("\r\n\r\n")) == std::string::npos) {
        if (in_.size() > (64 << 10)) throw HttpClientError("a response head over 64 KiB");
        if (!read_some(deadline))
            throw HttpClientError(in_.empty() ? "closed before answering"
                                              : "closed in the middle of the response head");
    }
    ClientResponse r = parse_head(in_.substr(0, head_end), keep_alive);
    in_.erase(0, head_end + 4);
    const std::string* te = r.header("transfer-encoding");
    const std::string* cl = r.header("content-length");
    if (te && lower(*te) == "chunked") {
        read_chunked(r.body, deadline);
    } else if (cl) {
        const size_t n = std::strtoul(cl->c_str(), nullptr, 10);
        while (in_.size() < n)
            if (!read_some(deadline))
                throw HttpClientError("closed after " + std::to_string(in_.size()) + " of " +
                                      std::to_string(n) + " body bytes");
        r.body = in_.substr(0, n);
        in_.erase(0, n);
    } else {  // the body ends with the connection
        while (read_some(deadline)) {
        }
        r.body = std::move(in_);
        in_.clear();
        keep_alive = false;
    }
    return r;
}

void HttpClient::read_chunked(std::string& body, double deadline) {
    for (;;) {
        size_t eol;
        while ((eol = in_.find("\r\n")) == std::string::npos)
            if (!read_some(deadline)) throw HttpClientError("closed in the middle of a chunk");
        const size_t size = std::strtoul(in_.c_str(), nullptr, 16);
        in_.erase(0, eol + 2);
        while (in_.size() < size + 2)
            if (!read_some(deadline)) throw HttpClientError("closed in the middle of a chunk");
        body.append(in_, 0, size);
        in_.erase(0, size + 2);
        if (size == 0) return;  // (syslm's server sends no trailers)
    }
}

ClientResponse HttpClient::request(
    const std::string& method, const std::string& path, std::string_view body,
    const std::string& content_type, double timeout_s,
    const std::vector<std::pair<std::string, std::string>>& headers) {
    const double deadline = now() + timeout_s;
    std::string msg = method + " " + path + " HTTP/1.1\r\nHost: " + host_ + "\r\n";
    for (const auto& [k, v] : headers) msg += k + ": " + v + "\r\n";
    if (!content_type.empty()) msg += "Content-Type: " + content_type + "\r\n";
    msg += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    msg.append(body);
    const std::string where =
        " (" + method + " http://" + host_ + ":" + std::to_string(port_) + path + ")";
    for (int attempt = 0;; ++attempt) {
        const bool reused = fd_ >= 0;
        try {
            if (!reused) connect_by(deadline);
            send_all(msg, deadline);
            bool keep_alive = true;
            ClientResponse r = read_response(deadline, keep_alive);
            if (!keep_alive) close_connection();
            return r;
        } catch (const HttpClientError& e) {
            // A kept-alive connection the server closed meanwhile: open a new one, once.
            const std::string what = e.what();
            const bool stale =
                reused && attempt == 0 &&
                (what == "closed before answering" || what.rfind("send failed", 0) == 0 ||
                 what.rfind("recv failed", 0) == 0);
            close_connection();
            if (!stale) throw HttpClientError(std::string(e.what()) + where);
        }
    }
}

}  // namespace syslm::serve::http
