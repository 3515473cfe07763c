#include "cli/tune_window.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "model/hparams.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tune/window_policy.hpp"

namespace syslm::cli {
namespace {

struct TuneWindowArgs {
    std::string model, text, out, json;
    tune::WindowSearch search;
    double max_increase = 0.01;
};

int run_tune_window(TuneWindowArgs& a) {
    const io::GGUFFile file(a.model);
    const model::HParams hp = model::load_hparams(file);
    SYSLM_CHECK(hp.sliding_window > 0, "tune window: ", a.model,
                " has no local attention layers (train one with --window and --window-range)");
    std::ifstream in(a.text, std::ios::binary);
    SYSLM_CHECK(in, a.text, ": cannot open text file");
    std::stringstream ss;
    ss << in.rdbuf();
    const auto tok = tokenizer::Tokenizer::from_gguf(file);
    const std::vector<int32_t> tokens = tok.encode(ss.str(), true, false);
    for (auto* v : {&a.search.lengths, &a.search.windows}) {
        std::sort(v->begin(), v->end());
        v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    std::fprintf(stderr, "tune window: %zu tokens; %zu lengths x %zu windows (the file's: %d)\n",
                 tokens.size(), a.search.lengths.size(), a.search.windows.size(),
                 hp.sliding_window);
    std::printf("| length | window | perplexity | tokens/s (prefill) | chunks |\n");
    std::printf("| ---: | ---: | ---: | ---: | ---: |\n");
    const auto table =
        tune::measure_windows(a.model, tokens, tok.add_bos() ? tok.bos() : -1, a.search,
                              [](const tune::WindowMeasurement& p) {
                                  std::printf("| %d | %d | %.4f | %.0f | %d |\n", p.length,
                                              p.window, p.ppl, p.tokens_per_s, p.chunks);
                                  std::fflush(stdout);
                              });
    const std::vector<int> chosen = tune::choose_windows(table, a.search.lengths, a.max_increase);
    std::printf("\npolicy (the smallest window within %.2f%% of each length's best perplexity):\n",
                100 * a.max_increase);
    for (size_t i = 0; i < chosen.size(); ++i)
        std::printf("  inputs up to %d tokens%s: window %d\n", a.search.lengths[i],
                    i + 1 == chosen.size() ? " and longer" : "", chosen[i]);
    tune::write_window_policy(file, a.search.lengths, chosen, a.out);
    std::fprintf(stderr, "wrote %s (generate / perplexity --window auto)\n", a.out.c_str());
    if (!a.json.empty()) {
        nlohmann::json j = {{"model", a.model}, {"max_ppl_increase", a.max_increase}};
        for (const auto& p : table)
            j["table"].push_back({{"length", p.length},
                                  {"window", p.window},
                                  {"ppl", p.ppl},
                                  {"tokens_per_s", p.tokens_per_s},
                                  {"chunks", p.chunks}});
        j["policy"] = {{"lengths", a.search.lengths}, {"windows", chosen}};
        std::ofstream(a.json) << j.dump(2) << "\n";
    }
    return 0;
}

}  // namespace

std::function<int()> setup_tune_window(CLI::App& sub) {
    auto a = std::make_shared<TuneWindowArgs>();
    sub.footer(
        "Example: syslm tune window -m model.gguf -f heldout.txt --lengths 128,512,2048 "
        "--windows 32,64,128,256,512 -o model-auto.gguf\n"
        "For a model trained with --window-range: every (length, window) pair's "
        "perplexity (llama.cpp's method, chunks of the length) and prefill speed on the "
        "text; for each length the smallest window within --max-ppl-increase of that "
        "length's best becomes the policy that --window auto applies.");
    sub.add_option("-m,--model", a->model, "GGUF model with local attention layers")
        ->required()
        ->check(CLI::ExistingFile);
    sub.add_option("-f,--file", a->text, "Held-out text")->required()->check(CLI::ExistingFile);
    sub.add_option("--lengths", a->search.lengths, "Input lengths (tokens), comma-separated")
        ->required()
        ->delimiter(',')
        ->check(CLI::Range(8, 1 << 20));
    sub.add_option("--windows", a->search.windows, "Windows to try, comma-separated")
        ->required()
        ->delimiter(',')
        ->check(CLI::Range(1, 1 << 20));
    sub.add_option("--max-ppl-increase", a->max_increase,
                   "Quality limit: relative perplexity increase over the length's best window")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 10.0));
    sub.add_option("--chunks", a->search.max_chunks, "Chunks scored per pair (default: all)");
    sub.add_option("-t,--threads", a->search.threads, "Threads (default: all cores)");
    sub.add_option("-o,--out", a->out, "The model with its window policy")->required();
    sub.add_option("--json", a->json, "Also write the table and the policy to this JSON file");
    return [a] { return run_tune_window(*a); };
}

}  // namespace syslm::cli
