// Text for the HTML and SVG reports syslm writes itself (eval, tune).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace syslm {

// v with `digits` decimals ("%.*f"), as the reports print figures.
inline std::string fixed_decimals(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

// s with &, <, > and " replaced by their entities: safe in element text and quoted attributes.
inline std::string escape_html(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

}  // namespace syslm
