#include "cli/window_option.hpp"

#include <charconv>
#include <cstdio>

#include "cli/command.hpp"
#include "core/error.hpp"

namespace syslm::cli {

namespace {

// A positive number of positions, or 0 when `value` is not one.
int parse_window(const std::string& value) {
    int w = 0;
    const char* end = value.data() + value.size();
    const auto r = std::from_chars(value.data(), end, w);
    return r.ec == std::errc() && r.ptr == end && w > 0 ? w : 0;
}

}  // namespace

void add_window_option(CLI::App& app, std::string& value) {
    app.add_option("--window", value,
                   "Local layers' window: N, or auto (the model's policy for the input's length, "
                   "from `syslm tune window`); default: the file's")
        ->check(CLI::Validator(
            [](const std::string& v) -> std::string {
                return parse_window(v) > 0 || v == "auto"
                           ? ""
                           : "give a positive number of positions or auto";
            },
            "N|auto"));
}

void apply_window(model::Model& m, const std::string& value, int64_t n_tokens) {
    if (value.empty()) return;
    const int w = value == "auto" ? m.hparams().window_for_length(n_tokens) : parse_window(value);
    usage_check(w > 0, "--window '", value, "': give a positive number of positions or auto");
    m.set_window(w);
    std::fprintf(stderr, "window: local layers see the last %d positions%s\n", w,
                 value == "auto" ? " (the model's policy for this input length)" : "");
}

}  // namespace syslm::cli
