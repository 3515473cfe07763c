// `syslm tune window` and `syslm tune experts`: a setting chosen by input length
// (tune/length_policy.hpp), measured on the user's held-out text.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "tune/length_policy.hpp"

namespace syslm::cli {

std::function<int()> setup_tune_by_length(CLI::App& sub, const tune::LengthKnob& knob);

}  // namespace syslm::cli
