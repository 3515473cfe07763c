// `syslm data clean` (curate/clean.hpp): its options under the `data` command.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace syslm::cli {

// Adds the `clean` subcommand to `data`; the function runs it (when it was the one parsed).
std::pair<CLI::App*, std::function<int()>> add_data_clean(CLI::App& data);

}  // namespace syslm::cli
