// `syslm tune edge`: a model split between a device and its cloud, packaged for a device
// profile (tune/edge_profile.hpp).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace syslm::cli {

std::function<int()> setup_tune_edge(CLI::App& sub);

}  // namespace syslm::cli
