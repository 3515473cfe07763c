// `syslm data augment` (curate/synonyms.hpp, curate/infill.hpp): its options under `data`.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace syslm::cli {

std::pair<CLI::App*, std::function<int()>> add_data_augment(CLI::App& data);

}  // namespace syslm::cli
