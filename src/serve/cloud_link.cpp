#include "serve/cloud_link.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "core/error.hpp"

namespace syslm::serve {

namespace {

// "20mbit" -> 2e7, "30ms" -> 0.03: a number and one of `units`; throws Error otherwise.
double with_unit(std::string_view s, std::initializer_list<std::pair<const char*, double>> units,
                 const std::string& spec) {
    const std::string text(s);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    const std::string unit(end);
    SYSLM_CHECK(end != text.c_str() && std::isfinite(v) && v >= 0, "--link '", spec, "': '", text,
                "' is not a non-negative number with a unit");
    if (v == 0 && unit.empty()) return 0;
    for (const auto& [name, scale] : units)
        if (unit == name) return v * scale;
    fail("--link '", spec, "': unknown unit '", unit, "' in '", text, "'");
}

void sleep_for(double s) {
    if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

}  // namespace

double LinkProfile::added_seconds(size_t bytes_up, size_t bytes_down) const {
    const double rate = bits_per_s > 0 ? 8.0 / bits_per_s : 0.0;
    return rtt_s + rate * static_cast<double>(bytes_up + bytes_down);
}

LinkProfile parse_link(std::string_view spec) {
    const std::string s(spec);
    const size_t comma = s.find(',');
    SYSLM_CHECK(comma != std::string::npos && s.find(',', comma + 1) == std::string::npos,
                "--link '", s, "': expected RATE,RTT such as 20mbit,30ms");
    LinkProfile p;
    p.bits_per_s = with_unit(std::string_view(s).substr(0, comma),
                             {{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}}, s);
    p.rtt_s =
        with_unit(std::string_view(s).substr(comma + 1), {{"us", 1e-6}, {"ms", 1e-3}, {"s", 1}}, s);
    return p;
}

CloudLink::CloudLink(const std::string& url, LinkProfile link, std::string api_key,
                     double timeout_s)
    : client_(url), link_(link), api_key_(std::move(api_key)), timeout_s_(timeout_s) {}

http::ClientResponse CloudLink::post(const std::string& path, std::string_view body,
                                     const std::string& content_type) {
    std::lock_guard lk(mu_);
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    ++stats_.calls;
    stats_.bytes_up += static_cast<int64_t>(body.size());
    const double rate = link_.bits_per_s > 0 ? 8.0 / link_.bits_per_s : 0.0;
    const double before = link_.rtt_s / 2 + rate * static_cast<double>(body.size());
    try {
        if (before >= timeout_s_)
            throw http::HttpClientError("the simulated link alone passes the deadline");
        sleep_for(before);
        std::vector<std::pair<std::string, std::string>> headers;
        if (!api_key_.empty()) headers.emplace_back("Authorization", "Bearer " + api_key_);
        http::ClientResponse r =
            client_.request("POST", path, body, content_type, timeout_s_ - before, headers);
        const double after = link_.rtt_s / 2 + rate * static_cast<double>(r.body.size());
        if (elapsed() + after > timeout_s_)
            throw http::HttpClientError(
                "the answer, at the simulated link's speed, passes the deadline");
        sleep_for(after);
        stats_.bytes_down += static_cast<int64_t>(r.body.size());
        stats_.simulated_seconds += before + after;
        stats_.seconds += elapsed();
        return r;
    } catch (...) {
        ++stats_.failures;
        stats_.seconds += elapsed();
        throw;
    }
}

LinkStats CloudLink::stats() const {
    std::lock_guard lk(mu_);
    return stats_;
}

}  // namespace syslm::serve
