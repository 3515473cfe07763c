// syslm lora: LoRA adapters (llama.cpp's adapter GGUF). `merge` folds adapters into a base
// model's weights, W + s B A, in each weight's own type.
#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "cli/lora_options.hpp"
#include "model/lora.hpp"
#include "model/transformer.hpp"

namespace syslm::cli {
namespace {

struct MergeArgs {
    std::string model, out;
    LoraArgs lora;
};

int run_merge(const MergeArgs& a) {
    usage_check(!a.lora.files.empty() || !a.lora.scaled.empty(),
                "lora merge: give --lora FILE or --lora-scaled FILE SCALE");
    const model::Model m(a.model);
    const LoadedLoras loras = a.lora.load(m);
    const int n = model::merge_lora(m, loras.uses, a.out);
    std::printf("%s: %s with %zu adapter(s) merged into %d matrices\n", a.out.c_str(),
                a.model.c_str(), loras.uses.size(), n);
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    app.require_subcommand(1);
    CLI::App* merge = app.add_subcommand("merge", "Fold LoRA adapters into the base weights");
    auto a = std::make_shared<MergeArgs>();
    merge->add_option("-m,--model", a->model, "Base model GGUF")
        ->required()
        ->check(CLI::ExistingFile);
    add_lora_options(*merge, a->lora);
    merge->add_option("-o,--out", a->out, "Merged model GGUF")->required();
    merge->footer(
        "Each adapted matrix becomes W + scale x alpha / r x B A in the base tensor's "
        "type (quantized ones are dequantized, merged and quantized again).\n"
        "Example: syslm lora merge -m base.gguf --lora style.gguf -o merged.gguf");
    return [a] { return run_merge(*a); };
}

}  // namespace

SYSLM_COMMAND(lora, "lora", "LoRA adapters: merge them into a model (lora merge)", setup);

}  // namespace syslm::cli
