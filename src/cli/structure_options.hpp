// The options that shape a new model's blocks beyond its sizes, the same for `syslm init` and
// `syslm train --arch` (whose help says "From scratch: "): local attention (window, pattern,
// global tokens, BigBird's random blocks), linear attention, blocks shared by several layers, the
// conv + attention hybrid and a learned Swish beta.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "model/random_init.hpp"

namespace syslm::cli {

struct StructureOptions {
    int window = 0, global_tokens = 0, conv_kernel = 0;
    bool swish_beta = false;
    std::string attn_pattern, linear_attn, share_blocks, random_blocks;
    bool any() const {
        return window > 0 || global_tokens > 0 || conv_kernel > 0 || swish_beta ||
               !attn_pattern.empty() || !linear_attn.empty() || !share_blocks.empty() ||
               !random_blocks.empty();
    }
};

// prefix starts every option's description.
void add_structure_options(CLI::App& app, StructureOptions& s, const std::string& prefix = "");
// Into cfg, for cfg.n_layer layers. Options that need another, or patterns that do not fit the
// layers, are usage errors naming the option; `command` starts their messages.
void apply_structure_options(const StructureOptions& s, const std::string& command,
                             model::InitConfig& cfg);

}  // namespace syslm::cli
