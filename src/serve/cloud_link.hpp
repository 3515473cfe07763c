// An edge's link to its cloud (docs/design/edge_cloud.md): calls through serve/http_client with
// the API key and a deadline, counted for /metrics (calls, failures, bytes each way, time), and
// the link simulator: `--link 20mbit,30ms` makes every call take what that link would add, the
// round-trip time plus each direction's bytes at that rate (half the RTT and the request's
// serialization before sending, half and the answer's after receiving), so tests and benchmarks
// give the same figures on any machine.
#pragma once

#include <mutex>
#include <string>
#include <string_view>

#include "serve/http_client.hpp"

namespace syslm::serve {

struct LinkProfile {
    double bits_per_s = 0;  // 0: as fast as the real connection
    double rtt_s = 0;
    // The time this link adds to a call moving these bytes.
    double added_seconds(size_t bytes_up, size_t bytes_down) const;
};

// "20mbit,30ms", "1gbit,0ms", "512kbit,2.5ms", "0,10ms" (no rate limit); units kbit, mbit, gbit
// (powers of 1000) and us, ms, s. Throws Error saying what is wrong.
LinkProfile parse_link(std::string_view spec);

struct LinkStats {
    int64_t calls = 0, failures = 0;
    int64_t bytes_up = 0, bytes_down = 0;  // bodies
    double seconds = 0;                    // wall time of the calls, simulation included
    double simulated_seconds = 0;          // what the simulator added
};

class CloudLink {
public:
    CloudLink(const std::string& url, LinkProfile link, std::string api_key, double timeout_s);
    // One POST; throws http::HttpClientError (the call failed or passed the deadline). Calls
    // are serialized: one connection, one call at a time.
    http::ClientResponse post(const std::string& path, std::string_view body,
                              const std::string& content_type);
    LinkStats stats() const;
    const LinkProfile& link() const { return link_; }

private:
    mutable std::mutex mu_;
    http::HttpClient client_;
    LinkProfile link_;
    std::string api_key_;
    double timeout_s_;
    LinkStats stats_;
};

}  // namespace syslm::serve
