#include "cli/tune_by_length.hpp"

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

namespace syslm::cli {
namespace {

struct TuneByLengthArgs {
    std::string model, text, out, json;
    tune::LengthSearch search;
    double max_increase = 0.01;
};

// What the knob needs of the model, and what it has now (for the report).
std::string check_model(const tune::LengthKnob& knob, const model::HParams& hp,
                        const std::string& path) {
    if (&knob == &tune::window_knob()) {
        SYSLM_CHECK(hp.sliding_window > 0, "tune window: ", path,
                    " has no local attention layers (train one with --window and "
                    "--window-range)");
        return std::to_string(hp.sliding_window);
    }
    SYSLM_CHECK(hp.expert_top_p > 0, "tune experts: ", path,
                " does not route its experts by top-p (train one with --expert-top-p)");
    return std::to_string(hp.expert_top_p);
}

int run_tune_by_length(const tune::LengthKnob& knob, TuneByLengthArgs& a) {
    const io::GGUFFile file(a.model);
    const std::string own = check_model(knob, model::load_hparams(file), a.model);
    std::ifstream in(a.text, std::ios::binary);
    SYSLM_CHECK(in, a.text, ": cannot open text file");
    std::stringstream ss;
    ss << in.rdbuf();
    const auto tok = tokenizer::Tokenizer::from_gguf(file);
    const std::vector<int32_t> tokens = tok.encode(ss.str(), true, false);
    std::sort(a.search.lengths.begin(), a.search.lengths.end());
    a.search.lengths.erase(std::unique(a.search.lengths.begin(), a.search.lengths.end()),
                           a.search.lengths.end());
    std::sort(a.search.values.begin(), a.search.values.end());
    a.search.values.erase(std::unique(a.search.values.begin(), a.search.values.end()),
                          a.search.values.end());
    const char* name = knob.name.c_str();
    std::fprintf(stderr, "tune %s: %zu tokens; %zu lengths x %zu values (the file's: %s)\n", name,
                 tokens.size(), a.search.lengths.size(), a.search.values.size(), own.c_str());
    std::printf("| length | %s | perplexity | tokens/s (prefill) | chunks |\n", name);
    std::printf("| ---: | ---: | ---: | ---: | ---: |\n");
    const auto table =
        tune::measure_by_length(knob, a.model, tokens, tok.add_bos() ? tok.bos() : -1, a.search,
                                [](const tune::LengthMeasurement& p) {
                                    std::printf("| %d | %g | %.4f | %.0f | %d |\n", p.length,
                                                p.value, p.ppl, p.tokens_per_s, p.chunks);
                                    std::fflush(stdout);
                                });
    const std::vector<double> chosen =
        tune::choose_by_length(knob, table, a.search.lengths, a.max_increase);
    std::printf("\npolicy (the smallest value within %.2f%% of each length's best perplexity):\n",
                100 * a.max_increase);
    for (size_t i = 0; i < chosen.size(); ++i)
        std::printf("  inputs up to %d tokens%s: %s %g\n", a.search.lengths[i],
                    i + 1 == chosen.size() ? " and longer" : "", name, chosen[i]);
    tune::write_length_policy(knob, file, a.search.lengths, chosen, a.out);
    std::fprintf(stderr, "wrote %s (generate / perplexity --%s auto)\n", a.out.c_str(),
                 &knob == &tune::window_knob() ? "window" : "expert-top-p");
    if (!a.json.empty()) {
        nlohmann::json j = {
            {"model", a.model}, {"knob", knob.name}, {"max_ppl_increase", a.max_increase}};
        for (const auto& p : table)
            j["table"].push_back({{"length", p.length},
                                  {knob.name, p.value},
                                  {"ppl", p.ppl},
                                  {"tokens_per_s", p.tokens_per_s},
                                  {"chunks", p.chunks}});
        j["policy"] = {{"lengths", a.search.lengths}, {knob.values_name, chosen}};
        std::ofstream(a.json) << j.dump(2) << "\n";
    }
    return 0;
}

}  // namespace

std::function<int()> setup_tune_by_length(CLI::App& sub, const tune::LengthKnob& knob) {
    auto a = std::make_shared<TuneByLengthArgs>();
    const bool window = &knob == &tune::window_knob();
    sub.footer(
        window ? "Example: syslm tune window -m model.gguf -f heldout.txt --lengths 128,512,2048 "
                 "--windows 32,64,128,256,512 -o model-auto.gguf\n"
                 "For a model trained with --window-range: every (length, window) pair's "
                 "perplexity (llama.cpp's method, chunks of the length) and prefill speed on the "
                 "text; for each length the smallest window within --max-ppl-increase of that "
                 "length's best becomes the policy that --window auto applies."
               : "Example: syslm tune experts -m moe.gguf -f heldout.txt --lengths 64,256,1024 "
                 "--top-p 0.1,0.2,0.3,0.5 -o moe-auto.gguf\n"
                 "For a model routed by top-p (--expert-top-p): every (length, p) pair's "
                 "perplexity and prefill speed on the text; for each length the smallest p (the "
                 "fewest experts per token) within --max-ppl-increase of that length's best "
                 "becomes the policy that --expert-top-p auto applies.");
    sub.add_option("-m,--model", a->model,
                   window ? "GGUF model with local attention layers" : "GGUF top-p MoE model")
        ->required()
        ->check(CLI::ExistingFile);
    sub.add_option("-f,--file", a->text, "Held-out text")->required()->check(CLI::ExistingFile);
    sub.add_option("--lengths", a->search.lengths, "Input lengths (tokens), comma-separated")
        ->required()
        ->delimiter(',')
        ->check(CLI::Range(8, 1 << 20));
    if (window)
        sub.add_option("--windows", a->search.values, "Windows to try, comma-separated")
            ->required()
            ->delimiter(',')
            ->check(CLI::Range(1, 1 << 20));
    else
        sub.add_option("--top-p", a->search.values, "Top-p values to try, comma-separated")
            ->required()
            ->delimiter(',')
            ->check(CLI::Range(1e-6, 1.0));
    sub.add_option("--max-ppl-increase", a->max_increase,
                   "Quality limit: relative perplexity increase over the length's best value")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 10.0));
    sub.add_option("--chunks", a->search.max_chunks, "Chunks scored per pair (default: all)");
    sub.add_option("-t,--threads", a->search.threads, "Threads (default: all cores)");
    sub.add_option("-o,--out", a->out, "The model with its policy")->required();
    sub.add_option("--json", a->json, "Also write the table and the policy to this JSON file");
    return [a, &knob] { return run_tune_by_length(knob, *a); };
}

}  // namespace syslm::cli
