// `syslm data score` (curate/score.hpp): its options under the `data` command.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace syslm::cli {

std::pair<CLI::App*, std::function<int()>> add_data_score(CLI::App& data);

}  // namespace syslm::cli
