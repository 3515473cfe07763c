// syslm imatrix: the importance matrix of a model on calibration text (llama-imatrix's output
// format), for `syslm quantize --imatrix` or llama.cpp's llama-quantize.
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "compress/imatrix.hpp"
#include "core/error.hpp"

namespace syslm::cli {
namespace {

struct ImatrixArgs {
    std::string model, file, output = "imatrix.gguf";
    int ctx = 512, chunks = -1, threads = 0;
};

int run_imatrix(const ImatrixArgs& a) {
    const model::Model m(a.model);
    compress::ImatrixOptions o;
    o.n_ctx = a.ctx;
    o.max_chunks = a.chunks;
    o.threads = a.threads;
    o.log = &std::cerr;
    const compress::ImportanceMatrix im = compress::collect_imatrix_from_text(m, a.file, o);
    im.save(a.output);
    std::cout << "wrote " << a.output << ": " << im.entries().size() << " matrices, "
              << im.chunk_count << " chunks of " << im.chunk_size << " tokens\n";
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<ImatrixArgs>();
    app.footer(
        "Runs the model over the text in chunks of -c tokens (each chunk's first token replaced "
        "by BOS, as llama-imatrix does) and records, for every weight matrix, the sum of the "
        "squared input activations per column and the token count. Every row goes through the "
        "output matrix as well. The file is llama.cpp's GGUF imatrix format.");
    app.add_option("-m,--model", a->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    app.add_option("-f,--file", a->file, "Calibration text")->required()->check(CLI::ExistingFile);
    app.add_option("-o,--output", a->output, "Imatrix file to write")->capture_default_str();
    app.add_option("-c,--ctx-size", a->ctx, "Tokens per chunk")
        ->capture_default_str()
        ->check(CLI::Range(8, 1 << 20));
    app.add_option("--chunks", a->chunks, "At most this many chunks (default: all)");
    app.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
    return [a] { return run_imatrix(*a); };
}

}  // namespace

SYSLM_COMMAND(imatrix, "imatrix", "Importance matrix of a model on calibration text", setup);

}  // namespace syslm::cli
