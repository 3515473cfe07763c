// `syslm tune train`: the training goal of `syslm tune` (tune/train_search.hpp), each trial a
// real `syslm train` process running the user's own command for a few steps.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace syslm::cli {

std::function<int()> setup_tune_train(CLI::App& sub);

}  // namespace syslm::cli
