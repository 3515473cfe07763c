// `syslm data mix` (curate/mixture.hpp): its options under the `data` command.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace syslm::cli {

std::pair<CLI::App*, std::function<int()>> add_data_mix(CLI::App& data);

}  // namespace syslm::cli
