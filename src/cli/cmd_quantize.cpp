// syslm quantize: convert the weight matrices of a GGUF model to another tensor type, choosing
// per-tensor types as llama.cpp's llama-quantize does by default (compress/quantize_model.hpp).
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "compress/quantize_model.hpp"
#include "core/error.hpp"

namespace syslm::cli {
namespace {

struct QuantizeArgs {
    std::string input, output, type;
    int threads = 0;
};

std::string target_list() {
    std::string s;
    for (const auto& name : compress::quant_target_names()) s += cat(s.empty() ? "" : ", ", name);
    return s;
}

int run_quantize(const QuantizeArgs& a) {
    const auto target = compress::parse_quant_target(a.type);
    if (!target) fail("unknown target type '", a.type, "': choose one of ", target_list());
    compress::QuantizeOptions opt;
    opt.target = *target;
    opt.threads = a.threads;
    opt.log = &std::cout;
    compress::quantize_model(a.input, a.output, opt);
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<QuantizeArgs>();
    app.footer(
        "TYPE is one of " + target_list() +
        " (case-insensitive). Blocks are bit-identical to ggml's reference quantizers, i.e. what "
        "llama-quantize writes without an importance matrix.\n"
        "Which tensors change, as llama-quantize decides by default:\n"
        "  - only weight matrices (names ending in 'weight' with >= 2 dimensions larger than 1, "
        "3-D expert tensors included); norms, biases and other 1-D tensors, ffn_gate_inp, "
        "position_embd and token_types are copied unchanged;\n"
        "  - for a quantized TYPE, output.weight (token_embd.weight when the output is tied to "
        "the embeddings) becomes Q6_K; it stays Q8_0 for TYPE Q8_0 and becomes Q8_0 for falcon "
        "or when its rows do not fit TYPE's block; in 8-expert models attn_v/attn_k become Q8_0;\n"
        "  - rows whose length is not a multiple of the type's block fall back: Q4_K -> Q5_0, "
        "Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0 (llama.cpp: IQ4_NL, which syslm lacks; "
        "same 32-block and size); if that does not fit either, or for the 32-block types (where "
        "llama.cpp gives up), F16;\n"
        "  - inputs of any type with kernels (F32, F16, BF16, quantized) are dequantized first, "
        "so a quantized model can be requantized, or expanded with TYPE F16/F32; tensors "
        "already of the chosen type are copied.\n"
        "  - the recipes Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M mix types as llama.cpp's do: _M gives "
        "attn_v and ffn_down of the first and last eighth of the layers and of every third layer "
        "between Q6_K (fused attn_qkv: Q5_K for Q4_K_M, Q6_K for Q5_K_M); Q4_K_S gives attn_v of "
        "the first 4 layers and ffn_down of the first eighth Q5_K. Plain K types are uniform.\n"
        "general.file_type is set to llama.cpp's value for the type (plain Q3_K/Q4_K/Q5_K: the _S "
        "variant) and general.quantization_version to 2; all other metadata is copied. Values "
        "must be finite. The output is written atomically; converted tensors are held in memory "
        "until then. Prints one line per tensor and a size summary (MiB).");
    app.add_option("input", a->input, "GGUF model to read")->required();
    app.add_option("output", a->output, "GGUF file to write")->required();
    app.add_option("type", a->type, "Target tensor type, e.g. Q4_0, Q4_K, Q8_0, F16")->required();
    app.add_option("-t,--threads", a->threads, "Threads over rows (default: all hardware threads)")
        ->check(CLI::NonNegativeNumber);
    return [a] { return run_quantize(*a); };
}

}  // namespace

SYSLM_COMMAND(quantize, "quantize", "Quantize the weights of a GGUF model (llama-quantize rules)",
              setup);

}  // namespace syslm::cli
