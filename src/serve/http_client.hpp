// A small HTTP/1.1 client for one server (an edge's calls to its cloud): one keep-alive
// connection, reused while the server keeps it; requests with a body and Content-Length;
// responses framed by Content-Length, chunked encoding or the connection's close; a total
// deadline per call covering connect, send and the whole response. Every failure is an
// HttpClientError saying what happened and where (refused, timed out, closed mid-response,
// malformed), never a hang.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace syslm::serve::http {

class HttpClientError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct ClientResponse {
    int status = 0;
    std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
    std::string body;                                          // de-chunked
    const std::string* header(std::string_view lower_name) const;
};

class HttpClient {
public:
    // url: http://HOST:PORT (a path after it is ignored); throws HttpClientError when it is not
    // one.
    explicit HttpClient(const std::string& url);
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    // One request, answered within `timeout_s` or HttpClientError. A reused connection that
    // the server had closed is reopened once, before any byte of the answer.
    ClientResponse request(const std::string& method, const std::string& path,
                           std::string_view body, const std::string& content_type, double timeout_s,
                           const std::vector<std::pair<std::string, std::string>>& headers = {});
    const std::string& host() const { return host_; }
    int port() const { return port_; }

private:
    void connect_by(double deadline);
    void close_connection();
    void send_all(std::string_view bytes, double deadline);
    // Reads more bytes into in_; false at EOF.
    bool read_some(double deadline);
    ClientResponse read_response(double deadline, bool& keep_alive);
    void read_chunked(std::string& body, double deadline);  // de-chunked into body
    std::string host_;
    int port_ = 0;
    int fd_ = -1;
    std::string in_;  // received, not yet consumed
};

}  // namespace syslm::serve::http
