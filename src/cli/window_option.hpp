// --window N|auto of generate, perplexity and serve: the local attention layers' window for one
// run of a model trained to accept several (`syslm train --window-range`).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "model/transformer.hpp"

namespace syslm::cli {

void add_window_option(CLI::App& app, std::string& value);
// Sets m's window for an input of n_tokens: a number, or "auto" (the model's policy,
// HParams::window_for_length); empty leaves the file's. Prints the choice to stderr.
void apply_window(model::Model& m, const std::string& value, int64_t n_tokens);

}  // namespace syslm::cli
