// syslm quantize: convert the weight matrices of a GGUF model to another tensor type, choosing
// per-tensor types as llama.cpp's llama-quantize does (compress/quantize_model.hpp), optionally
// weighting each column's error by an importance matrix (compress/imatrix.hpp).
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "compress/imatrix.hpp"
#include "compress/quantize_model.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "model/hparams.hpp"
#include "tune/plan.hpp"

namespace syslm::cli {
namespace {

struct QuantizeArgs {
    std::string input, output, type, imatrix, imatrix_out, plan;
    std::vector<std::string> tensor_types;
    int threads = 0;
    int ctx = 512, chunks = -1;
    bool awq = false;
    double smooth = 0.5;
};

std::string target_list() {
    std::string s;
    for (const auto& name : compress::quant_target_names()) s += cat(s.empty() ? "" : ", ", name);
    return s;
}

int run_quantize(const QuantizeArgs& a) {
    usage_check(a.type.empty() != a.plan.empty(), "give the target TYPE or --plan, not both");
    compress::QuantizeOptions opt;
    std::optional<tune::Plan> plan;
    if (!a.plan.empty()) {
        // The plan's file: its recipe and per-tensor types, with the importance matrix when the
        // plan used one (`syslm tune` leaves it beside the plan as imatrix.gguf).
        plan = tune::load_plan(a.plan);
        usage_check(!plan->imatrix || !a.imatrix.empty(), a.plan, " quantizes with an importance ",
                    "matrix: give --imatrix (the ", plan->prune ? "base-imatrix" : "imatrix",
                    ".gguf beside the plan)");
        usage_check(plan->imatrix || a.imatrix.empty(), a.plan, " quantizes without an ",
                    "importance matrix: --imatrix contradicts it");
        const io::GGUFFile input(a.input);
        if (const auto& pr = plan->prune) {
            // A pruned plan's file is quantized from its recovered base, not from the input.
            const model::HParams hp = model::load_hparams(input);
            usage_check(hp.n_layer == pr->n_layer && hp.n_head == pr->n_head && hp.n_ff == pr->n_ff,
                        a.plan, " prunes the model to ", pr->n_layer, " layers, ", pr->n_head,
                        " heads and FFN ", pr->n_ff, " and recovers it by distillation: quantize "
                        "its base (base.gguf beside the plan, --imatrix base-imatrix.gguf), not ",
                        a.input, " (", hp.n_layer, " layers, ", hp.n_head, " heads, FFN ", hp.n_ff,
                        ")");
        }
        opt = tune::quantize_options(*plan, tune::matrices_type(input));
    } else {
        const auto target = compress::parse_quant_target(a.type);
        if (!target) fail("unknown target type '", a.type, "': choose one of ", target_list());
        opt.target = *target;
    }
    usage_check(!plan || a.tensor_types.empty(), "--tensor-type contradicts --plan (the plan ",
                "lists every tensor's type)");
    const compress::QuantTarget* target = &opt.target;
    for (const std::string& rule : a.tensor_types) {
        try {
            opt.tensor_types.push_back(compress::parse_tensor_type_rule(rule));
        } catch (const Error& e) {
            throw UsageError(cat("--tensor-type: ", e.what()));
        }
    }
    opt.threads = a.threads;
    opt.log = &std::cout;
    compress::ImportanceMatrix im;
    if (!a.imatrix.empty()) {
        compress::ImatrixOptions io;
        io.n_ctx = a.ctx;
        io.max_chunks = a.chunks;
        io.threads = a.threads;
        io.log = &std::cerr;
        im = compress::load_or_collect_imatrix(a.input, a.imatrix, io);
        if (!a.imatrix_out.empty()) im.save(a.imatrix_out);
        opt.imatrix = &im;
    }
    if (a.awq && a.imatrix.empty()) fail("--awq needs --imatrix (a file or calibration text)");
    opt.awq = a.awq;
    opt.smooth_alpha = a.smooth;
    SYSLM_CHECK(!target->w8a8 || !a.imatrix.empty(),
                "W8A8 needs --calib calibration text for its activation scales");
    compress::quantize_model(a.input, a.output, opt);
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<QuantizeArgs>();
    app.footer(
        "TYPE is one of " + target_list() +
        " (case-insensitive). Blocks are bit-identical to what llama-quantize writes: ggml's "
        "reference quantizers, or with --imatrix its importance-weighted ones (Q4_0, Q4_1, Q5_0, "
        "Q5_1 and the K-quants; Q8_0 and the float types ignore the importance, as in ggml).\n"
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
        "  - the recipes Q2_K, Q3_K_S/M/L, Q4_K_S/M and Q5_K_S/M mix types by tensor and layer as "
        "llama.cpp's do (e.g. Q4_K_M gives attn_v and ffn_down of the first and last eighth of "
        "the layers and of every third layer between Q6_K; Q2_K gives attn_v, attn_output and "
        "ffn_down Q3_K). Plain Q3_K/Q4_K/Q5_K are uniform (llama-quantize reads them as _M).\n"
        "  - with --imatrix, Q4_0/Q5_0 give ffn_down of the first eighth of the layers Q4_1/Q5_1, "
        "as llama-quantize does.\n"
        "general.file_type is set to llama.cpp's value for the type (plain Q3_K/Q4_K/Q5_K: the _S "
        "variant) and general.quantization_version to 2; all other metadata is copied. Values "
        "must be finite. The output is written atomically; converted tensors are held in memory "
        "until then. Prints one line per tensor and a size summary (MiB).");
    app.add_option("input", a->input, "GGUF model to read")->required();
    app.add_option("output", a->output, "GGUF file to write")->required();
    app.add_option("type", a->type, "Target tensor type, e.g. Q4_0, Q4_K, Q8_0, F16");
    app.add_option("--plan", a->plan,
                   "Instead of TYPE: build the file of a plan from `syslm tune` (its plan.json): "
                   "its recipe and a type per listed tensor")
        ->check(CLI::ExistingFile);
    app.add_option("-t,--threads", a->threads, "Threads over rows (default: all hardware threads)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--imatrix,--calib", a->imatrix,
                   "Importance matrix: an imatrix file (syslm imatrix or llama-imatrix, GGUF or "
                   "legacy .dat), or a calibration text the input model is run over first")
        ->check(CLI::ExistingFile);
    app.add_option("--imatrix-out", a->imatrix_out,
                   "Also save the importance matrix computed from calibration text (GGUF)");
    app.add_option("--tensor-type", a->tensor_types,
                   "PATTERN=TYPE (repeatable): the weight matrices whose names the regex matches "
                   "get TYPE instead of the recipe's choice, first match first, as "
                   "llama-quantize's --tensor-type (e.g. attn_v=q8_0, 'blk\\.0\\.'=q6_k)")
        ->allow_extra_args(false);  // one rule per occurrence: the positionals may follow
    app.add_option("--smooth", a->smooth,
                   "W8A8: SmoothQuant migration strength alpha (0: none)")
        ->capture_default_str()
        ->check(finite_in(0.0, 0.99));
    app.add_flag("--awq", a->awq,
                 "Also scale salient input channels (AWQ), searched per layer on the importance "
                 "matrix and folded into the norms / previous matrices; the file stays a plain "
                 "GGUF of the same architecture");
    app.add_option("-c,--ctx-size", a->ctx, "Calibration: tokens per chunk")
        ->capture_default_str()
        ->check(CLI::Range(8, 1 << 20));
    app.add_option("--chunks", a->chunks, "Calibration: at most this many chunks (default: all)");
    return [a] { return run_quantize(*a); };
}

}  // namespace

SYSLM_COMMAND(quantize, "quantize", "Quantize the weights of a GGUF model (llama-quantize rules)",
              setup);

}  // namespace syslm::cli
