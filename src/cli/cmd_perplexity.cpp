// syslm perplexity: llama-perplexity's default method on a text file.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cache_type_options.hpp"
#include "cli/lora_options.hpp"
#include "cli/command.hpp"
#include "cli/length_options.hpp"
#include "compress/perplexity.hpp"
#include "core/error.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::cli {
namespace {

struct PerplexityArgs {
    std::string model, file;
    int n_ctx = 512;
    int threads = 0;
    CacheTypeArgs cache_type;
    LoraArgs lora;
    int batch = 512;
    int chunks = -1;
    bool json = false;
    std::string window, expert_top_p;
};

int run_perplexity(const PerplexityArgs& a) {
    std::ifstream in(a.file, std::ios::binary);
    SYSLM_CHECK(in, a.file, ": cannot open text file");
    std::stringstream ss;
    ss << in.rdbuf();
    model::Model m(a.model);
    apply_window(m, a.window, a.n_ctx);
    apply_expert_top_p(m, a.expert_top_p, a.n_ctx);
    const auto tok = tokenizer::Tokenizer::from_gguf(m.file());
    std::vector<int32_t> tokens =
        tok.encode(ss.str(), /*add_special=*/true, /*parse_special=*/false);
    model::Context ctx(m, a.n_ctx, a.threads, std::min(a.batch, a.n_ctx), a.cache_type.types());
    const LoadedLoras loras = a.lora.load(m);
    ctx.set_loras(loras.uses);
    std::fprintf(stderr, "perplexity: %zu tokens, %zu chunks of %d\n", tokens.size(),
                 tokens.size() / static_cast<size_t>(a.n_ctx), a.n_ctx);
    const auto r =
        compress::perplexity(ctx, std::move(tokens), a.n_ctx, tok.add_bos() ? tok.bos() : -1,
                             a.chunks, [](int i, double ppl) {
                                 std::printf("[%d]%.4f,", i + 1, ppl);
                                 std::fflush(stdout);
                             });
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f (%d chunks, %d scored tokens)\n", r.ppl,
                r.ppl_stderr, r.n_chunks, r.n_scored);
    if (a.json)
        std::printf("%s\n", nlohmann::json{{"ppl", r.ppl}, {"tokens", r.n_scored}}.dump().c_str());
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<PerplexityArgs>();
    app.footer(
        "Method (as llama-perplexity): the text is tokenized with BOS, cut into chunks of -c "
        "tokens whose first token is replaced by BOS, and the second half of each chunk is scored. "
        "Needs at least 2*c tokens.");
    app.add_option("-m,--model", a->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    app.add_option("-f,--file", a->file, "Text file")->required()->check(CLI::ExistingFile);
    app.add_option("-c,--ctx-size", a->n_ctx, "Tokens per chunk")
        ->capture_default_str()
        ->check(CLI::Range(8, 1 << 20));
    app.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
    add_cache_type_options(app, a->cache_type);
    add_lora_options(app, a->lora);
    app.add_option("-b,--batch-size", a->batch, "Tokens per forward batch")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--chunks", a->chunks, "Score at most this many chunks (default: all)");
    add_length_options(app, a->window, a->expert_top_p);
    app.add_flag("--json", a->json, R"(Print {"ppl": ..., "tokens": ...} as the last line)");
    return [a] { return run_perplexity(*a); };
}

}  // namespace

SYSLM_COMMAND(perplexity, "perplexity", "Perplexity of a model on a text file (llama.cpp method)",
              setup);

}  // namespace syslm::cli
