#include "cli/window_option.hpp"

#include <charconv>
#include <cstdio>

#include "cli/command.hpp"
#include "core/error.hpp"

namespace syslm::cli {

void add_window_option(CLI::App& app, std::string& value, bool auto_allowed) {
    app.add_option("--window", value,
                   auto_allowed ? "Local layers' window: N, or auto (the model's policy for the "
                                  "input's length, from `syslm tune window`); default: the file's"
                                : "Local layers' window: N; default: the file's");
}

void apply_window(model::Model& m, const std::string& value, int64_t n_tokens) {
    if (value.empty()) return;
    int w = 0;
    if (value == "auto") {
        w = m.hparams().window_for_length(n_tokens);
    } else {
        const char* end = value.data() + value.size();
        const auto r = std::from_chars(value.data(), end, w);
        usage_check(r.ec == std::errc() && r.ptr == end && w > 0, "--window '", value,
                    "': give a positive number of positions or auto");
    }
    m.set_window(w);
    std::fprintf(stderr, "window: local layers see the last %d positions%s\n", w,
                 value == "auto" ? " (the model's policy for this input length)" : "");
}

}  // namespace syslm::cli
