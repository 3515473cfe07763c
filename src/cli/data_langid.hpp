// `syslm data langid` (curate/langid.hpp): train a language identifier on labelled text
// (--train LANG=PATH ...) and / or measure one on held-out text (--test LANG=PATH ...).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace syslm::cli {

std::pair<CLI::App*, std::function<int()>> add_data_langid(CLI::App& data);

}  // namespace syslm::cli
