// Validators for numeric options. CLI11's Range, PositiveNumber and NonNegativeNumber let NaN
// through (every comparison with NaN is false) and accept infinities; these refuse both. Each
// message says what the option accepts; CLI11 prefixes the option's name, and main() turns the
// error into `syslm: error: ...` with the usage exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <sstream>
#include <string>

namespace syslm::cli {

// A finite number in the interval from lo to hi; lo_open / hi_open exclude the end.
inline CLI::Validator finite_in(double lo, double hi, bool lo_open = false, bool hi_open = false) {
    auto show = [](double x) {
        if (std::isinf(x)) return std::string(x < 0 ? "-inf" : "inf");
        std::ostringstream s;
        s << x;
        return s.str();
    };
    const std::string range = (lo_open ? "(" : "[") + show(lo) + ", " + show(hi) +
                              (hi_open || std::isinf(hi) ? ")" : "]");
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number";
            const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) &&
                            (hi_open ? v < hi : v <= hi);
            return ok ? std::string() : "must be a finite number in " + range + ", got " + text;
        },
        "in " + range);
}

inline CLI::Validator non_negative() { return finite_in(0, INFINITY); }
inline CLI::Validator positive() { return finite_in(0, INFINITY, true); }
inline CLI::Validator unit_interval() { return finite_in(0, 1); }            // [0, 1]
inline CLI::Validator unit_interval_open_top() { return finite_in(0, 1, false, true); }  // [0, 1)

}  // namespace syslm::cli
