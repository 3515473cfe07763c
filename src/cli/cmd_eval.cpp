// syslm eval: size, quality (perplexity, KL divergence and top-1 agreement with a reference) and
// speed of several model files side by side, as a table, JSON and an offline HTML page.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "compress/evaluate.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "model/kv_cache.hpp"

namespace syslm::cli {
namespace {

struct EvalArgs {
    std::vector<std::string> models, texts;
    std::string report, json;
    compress::EvalOptions o;
};

int run_eval(EvalArgs& a) {
    a.o.log = &std::cerr;
    const compress::EvalReport r = compress::evaluate(a.models, a.texts, a.o);
    std::cout << compress::eval_markdown(r);
    if (!a.report.empty()) {
        write_file_atomically(a.report, compress::eval_html(r));
        std::cout << "wrote " << a.report << '\n';
    }
    if (!a.json.empty()) {
        write_file_atomically(a.json, compress::eval_json(r) + "\n");
        std::cout << "wrote " << a.json << '\n';
    }
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    app.footer(
        "The first -m is the reference: KL divergence and top-1 agreement compare every model's "
        "next-token distribution with it on the same positions. Perplexity follows "
        "llama-perplexity (chunks of -c tokens starting with BOS, second half scored). Speeds: "
        "llama-bench's pp and tg tests. All models must share the reference's vocabulary. "
        "With --cache-types each model runs with each KV cache type (KL of a quantized cache "
        "against the F16 one: --cache-types f16,q8_0,q4_0).");
    app.add_option("-m,--model", a->models, "GGUF model (repeat; the first is the reference)")
        ->required()
        ->check(CLI::ExistingFile);
    app.add_option("--text", a->texts, "Held-out text file (repeat)")
        ->required()
        ->check(CLI::ExistingFile);
    app.add_option("-c,--ctx-size", a->o.n_ctx, "Tokens per chunk")
        ->capture_default_str()
        ->check(CLI::Range(8, 1 << 20));
    app.add_option("--chunks", a->o.max_chunks, "At most this many chunks per text");
    app.add_option("-t,--threads", a->o.threads, "Threads (default: all cores)");
    app.add_option("-p,--n-prompt", a->o.speed_prompt, "Prefill test tokens (0: skip)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("-n,--n-gen", a->o.speed_gen, "Decode test tokens (0: skip)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("-r,--repetitions", a->o.speed_reps, "Timed repetitions per speed test")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("-d,--n-depth", a->o.speed_depth,
                   "Positions cached before each speed test (llama-bench -d)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("--split-at", a->o.split_at,
                   "Also run every model split at this layer (serve --role edge --split-at), "
                   "its residual rows rounded as each --wires format carries them: the KL the "
                   "link's format costs")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--split-edge", a->o.split_edge,
                   "With --split-at: the split's first half from this file (the edge's "
                   "compressed copy of the model), the rest from the model")
        ->check(CLI::ExistingFile)
        ->needs("--split-at");
    app.add_option("--wires", a->o.wires, "With --split-at: wire formats (f16, int8, f32)")
        ->delimiter(',')
        ->check(CLI::IsMember({"f16", "int8", "f32"}))
        ->needs("--split-at");
    app.add_option("--cache-types", a->o.cache_types,
                   "KV cache types to evaluate every model with (comma-separated; a pair as "
                   "K/V, e.g. f16,q8_0,q4_0,q8_0/q4_0): the first type of the first model is "
                   "the reference. Default: f16")
        ->delimiter(',')
        ->check([](const std::string& v) {
            try {
                model::kv_types_from_name(v);
                return std::string();
            } catch (const Error& e) {
                return std::string(e.what());
            }
        });
    app.add_flag("--cascade", a->o.cascade,
                 "Cascade curves: each model answering where it is confident and deferring the "
                 "least confident positions to the first model (agreement and KL by share "
                 "deferred, against deferring at random)");
    app.add_option("--report", a->report, "Write an HTML page with the table and charts");
    app.add_option("--json", a->json, "Write the figures as JSON");
    return [a] { return run_eval(*a); };
}

}  // namespace

SYSLM_COMMAND(eval, "eval", "Size, quality and speed of model files side by side", setup);

}  // namespace syslm::cli
