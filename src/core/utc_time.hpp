// The current time as an ISO 8601 UTC string ("2026-12-03T07:45:00Z"), for reports and caches
// that record when they were measured.
#pragma once

#include <ctime>
#include <string>

namespace syslm {

inline std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

}  // namespace syslm
