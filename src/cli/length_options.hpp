// Options whose value may be "auto", the model's policy for the input's length (model::
// LengthPolicy, written by `syslm tune window|experts`):
//   --window N|auto of generate, perplexity and serve: the local attention layers' window of a
//     model trained to accept several (`syslm train --window-range`);
//   --expert-top-p P|auto of generate and perplexity: a top-p MoE model's p.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "model/transformer.hpp"

namespace syslm::cli {

// --window and --expert-top-p: a number, or auto.
void add_length_options(CLI::App& app, std::string& window, std::string& expert_top_p);
// Sets m's window for an input of n_tokens: a number, or "auto" (the model's policy,
// HParams::window_for_length); empty leaves the file's. Prints the choice to stderr.
void apply_window(model::Model& m, const std::string& value, int64_t n_tokens);

// The same for a top-p MoE model's p (HParams::top_p_for_length).
void apply_expert_top_p(model::Model& m, const std::string& value, int64_t n_tokens);

}  // namespace syslm::cli
