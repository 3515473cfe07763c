// `syslm tune window`: the local attention window chosen by input length
// (tune/window_policy.hpp), measured on the user's held-out text.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace syslm::cli {

std::function<int()> setup_tune_window(CLI::App& sub);

}  // namespace syslm::cli
