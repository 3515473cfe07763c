// syslm prune: unstructured (magnitude, Wanda, N:M) or structured (heads, FFN channels) pruning
// of a float GGUF model (compress/prune.hpp).
#include <fstream>
#include <iostream>
#include <sstream>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "compress/imatrix.hpp"
#include "compress/prune.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::cli {
namespace {

struct PruneArgs {
    std::string input, output, method = "wanda", pattern, structured, calib, group = "row";
    double sparsity = 0.5;
    bool mask_only = false;
    int ctx = 512, chunks = -1, threads = 0;
};

int run_prune(const PruneArgs& a) {
    compress::PruneOptions o;
    o.threads = a.threads;
    o.log = &std::cout;
    o.mask_only = a.mask_only;
    if (!a.structured.empty()) {
        compress::parse_structured_spec(a.structured, o);
    } else {
        SYSLM_CHECK(a.method == "wanda" || a.method == "magnitude", "--method must be wanda or "
                    "magnitude, not '", a.method, "'");
        o.score = a.method == "wanda" ? compress::PruneScore::Wanda : compress::PruneScore::Magnitude;
        o.sparsity = a.sparsity;
        SYSLM_CHECK(a.group == "row" || a.group == "matrix", "--group must be row or matrix");
        o.per_matrix = a.group == "matrix";
        if (!a.pattern.empty()) {
            const size_t colon = a.pattern.find(':');
            SYSLM_CHECK(colon != std::string::npos, "--pattern must be N:M, e.g. 2:4");
            o.pattern_n = std::stoi(a.pattern.substr(0, colon));
            o.pattern_m = std::stoi(a.pattern.substr(colon + 1));
        }
    }
    const bool needs_calib = !a.structured.empty() || o.score == compress::PruneScore::Wanda;
    compress::ImportanceMatrix im;
    if (needs_calib) {
        SYSLM_CHECK(!a.calib.empty(), "--calib (calibration text or an imatrix file) is needed ",
                    a.structured.empty() ? "for Wanda scores" : "for structured pruning");
        compress::ImatrixOptions io;
        io.n_ctx = a.ctx;
        io.max_chunks = a.chunks;
        io.threads = a.threads;
        io.log = &std::cerr;
        im = compress::load_or_collect_imatrix(a.input, a.calib, io);
        o.imatrix = &im;
    }
    if (o.layers > 0) {  // the layer choice runs the model over the calibration text itself
        SYSLM_CHECK(!compress::ImportanceMatrix::looks_like_imatrix(a.calib),
                    "--structured layers=N needs --calib to be calibration text, not an imatrix");
        std::ifstream in(a.calib, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        const io::GGUFFile f(a.input);
        const auto tok = tokenizer::Tokenizer::from_gguf(f);
        o.calib_tokens = tok.encode(ss.str(), true, false);
        o.calib_bos = tok.add_bos() ? tok.bos() : -1;
        o.calib_ctx = std::min(a.ctx, static_cast<int>(f.get_u32(
                                          f.get_string("general.architecture") + ".context_length",
                                          static_cast<uint32_t>(a.ctx))));
    }
    if (a.structured.empty())
        compress::prune_unstructured(a.input, a.output, o);
    else
        compress::prune_structured(a.input, a.output, o);
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<PruneArgs>();
    app.footer(
        "Unstructured: in every row of the blocks' weight matrices, the lowest-scoring weights "
        "become zero (--sparsity of each row, or --pattern N:M: M-N of every M consecutive). "
        "Scores: magnitude |W|, or Wanda |W| * ||X|| with activation norms from --calib.\n"
        "Structured (--structured layers=N,heads=F,ffn=F): removes N whole layers (greedily, the "
        "one whose absence raises the loss on --calib text least) and that fraction of attention "
        "heads (whole KV groups under GQA) and FFN channels from every layer, the least important "
        "by the output energy they carry on --calib; writes a smaller model of the same "
        "architecture (--mask-only: the same shapes with those parts zeroed instead).\n"
        "The input must have float matrices (F32/F16/BF16): prune, optionally fine-tune "
        "(syslm train --init OUT --keep-zeros keeps the zeros), then quantize.");
    app.add_option("input", a->input, "GGUF model to read")->required()->check(CLI::ExistingFile);
    app.add_option("output", a->output, "GGUF file to write")->required();
    app.add_option("--method", a->method, "Unstructured score: wanda or magnitude")
        ->capture_default_str();
    app.add_option("--sparsity", a->sparsity, "Fraction of each row set to zero")
        ->capture_default_str()
        ->check(finite_in(0, 1, false, true));
    app.add_option("--pattern", a->pattern, "Semi-structured N:M pattern, e.g. 2:4");
    app.add_option("--group", a->group,
                   "Where scores compete: row (each output's weights; Wanda's choice) or matrix "
                   "(classic layer-wise magnitude pruning)")
        ->capture_default_str();
    app.add_option("--structured", a->structured, "Remove structures: layers=N,heads=F,ffn=F");
    app.add_flag("--mask-only", a->mask_only, "Structured: zero instead of removing");
    app.add_option("--calib", a->calib, "Calibration text or an imatrix file (GGUF or .dat)")
        ->check(CLI::ExistingFile);
    app.add_option("-c,--ctx-size", a->ctx, "Calibration: tokens per chunk")->capture_default_str();
    app.add_option("--chunks", a->chunks, "Calibration: at most this many chunks");
    app.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
    return [a] { return run_prune(*a); };
}

}  // namespace

SYSLM_COMMAND(prune, "prune", "Prune a model: magnitude, Wanda, N:M, or whole heads / FFN channels",
              setup);

}  // namespace syslm::cli
