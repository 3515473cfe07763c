// The current time as text: ISO 8601 UTC ("2026-12-03T07:45:00Z") for reports and caches that
// record when they were measured, or any strftime format in local time (chat templates' dates).
#pragma once

#include <ctime>
#include <string>

namespace syslm {

inline std::string format_now(const char* format, bool utc) {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    if (utc)
        gmtime_r(&t, &tm);
    else
        localtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, format, &tm);
    return buf;
}

inline std::string utc_now() {
    return format_now("%Y-%m-%dT%H:%M:%SZ", true);
}

}  // namespace syslm
