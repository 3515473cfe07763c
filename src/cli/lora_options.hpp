// LoRA adapters on the command line, as llama.cpp takes them: --lora FILE (scale 1) and
// --lora-scaled FILE SCALE, each repeatable. generate, perplexity and logits share them.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "model/lora.hpp"

namespace syslm::cli {

// The adapters, loaded, and their uses (every row); the uses point into `adapters`.
struct LoadedLoras {
    std::vector<std::unique_ptr<model::LoraAdapter>> adapters;
    std::vector<model::LoraUse> uses;
};

struct LoraArgs {
    std::vector<std::string> files;
    std::vector<std::string> scaled;  // FILE SCALE, FILE SCALE, ...

    // Loads and checks the adapters against the model. Throws Error for a bad file or scale.
    LoadedLoras load(const model::Model& m) const;
};

void add_lora_options(CLI::App& app, LoraArgs& a);

}  // namespace syslm::cli
