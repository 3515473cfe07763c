#include "cli/lora_options.hpp"

#include <cmath>

#include "core/error.hpp"

namespace syslm::cli {

LoadedLoras LoraArgs::load(const model::Model& m) const {
    std::vector<std::pair<std::string, float>> all;
    for (const std::string& f : files) all.push_back({f, 1.0f});
    for (size_t i = 0; i + 1 < scaled.size(); i += 2) {
        float s = 0;
        size_t used = 0;
        try {
            s = std::stof(scaled[i + 1], &used);
        } catch (const std::exception&) {
            used = 0;
        }
        SYSLM_CHECK(used == scaled[i + 1].size() && std::isfinite(s), "--lora-scaled ", scaled[i],
                    ": the scale '", scaled[i + 1], "' is not a finite number");
        all.push_back({scaled[i], s});
    }
    LoadedLoras out;
    for (const auto& [file, scale] : all) {
        out.adapters.push_back(std::make_unique<model::LoraAdapter>(file, m));
        out.uses.push_back({out.adapters.back().get(), scale, {}});
    }
    return out;
}

void add_lora_options(CLI::App& app, LoraArgs& a) {
    app.add_option("--lora", a.files,
                   "LoRA adapter (llama.cpp's adapter GGUF), scale 1; repeatable")
        ->check(CLI::ExistingFile);
    app.add_option("--lora-scaled", a.scaled, "LoRA adapter with its scale: FILE SCALE; repeatable")
        ->expected(2)
        ->allow_extra_args(false);
}

}  // namespace syslm::cli
