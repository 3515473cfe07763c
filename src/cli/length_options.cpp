#include "cli/length_options.hpp"

#include <charconv>
#include <cmath>
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

// A top-p in (0, 1], or 0 when `value` is not one.
float parse_top_p(const std::string& value) {
    float p = 0;
    const char* end = value.data() + value.size();
    const auto r = std::from_chars(value.data(), end, p);
    return r.ec == std::errc() && r.ptr == end && std::isfinite(p) && p > 0 && p <= 1 ? p : 0;
}

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

void add_expert_top_p_option(CLI::App& app, std::string& value) {
    app.add_option("--expert-top-p", value,
                   "A top-p MoE model's p: P in (0, 1], or auto (the model's policy for the "
                   "input's length, from `syslm tune experts`; serve: each request's prompt + "
                   "max_tokens); default: the file's")
        ->check(CLI::Validator(
            [](const std::string& v) -> std::string {
                return parse_top_p(v) > 0 || v == "auto" ? "" : "give a p in (0, 1] or auto";
            },
            "P|auto"));
}

}  // namespace

void apply_window(model::Model& m, const std::string& value, int64_t n_tokens) {
    if (value.empty()) return;
    const int w = value == "auto" ? m.hparams().window_for_length(n_tokens) : parse_window(value);
    usage_check(w > 0, "--window '", value, "': give a positive number of positions or auto");
    m.set_window(w);
    std::fprintf(stderr, "window: local layers see the last %d positions%s\n", w,
                 value == "auto" ? " (the model's policy for this input length)" : "");
}

void apply_expert_top_p(model::Model& m, const std::string& value, int64_t n_tokens) {
    if (value.empty()) return;
    const float p = value == "auto" ? m.hparams().top_p_for_length(n_tokens) : parse_top_p(value);
    usage_check(p > 0, "--expert-top-p '", value, "': give a p in (0, 1] or auto");
    m.set_expert_top_p(p);
    std::fprintf(stderr, "experts: top-p %g%s\n", p,
                 value == "auto" ? " (the model's policy for this input length)" : "");
}

void add_length_options(CLI::App& app, std::string& window, std::string& expert_top_p) {
    add_window_option(app, window);
    add_expert_top_p_option(app, expert_top_p);
}

}  // namespace syslm::cli
