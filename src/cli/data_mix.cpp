#include "cli/data_mix.hpp"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/option_checks.hpp"
#include "core/error.hpp"
#include "curate/mixture.hpp"
#include "curate/mixture_report.hpp"
#include "io/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::cli {

namespace {

struct MixArgs {
    curate::MixOptions opt;
    std::vector<std::string> sources;
    std::string unit = "blank", strata, search, proxy, report;
    int runs = 16;
};

// "difficulty:K" -> K
int difficulty_levels(const std::string& spec) {
    if (spec.empty()) return 0;
    const std::string prefix = "difficulty:";
    SYSLM_CHECK(spec.rfind(prefix, 0) == 0 && spec.size() > prefix.size(), "--strata '", spec,
                "': expected difficulty:K");
    const std::string k = spec.substr(prefix.size());
    SYSLM_CHECK(k.find_first_not_of("0123456789") == std::string::npos && k.size() <= 2,
                "--strata '", spec, "': K must be a whole number from 2 to 16");
    const int levels = std::stoi(k);
    SYSLM_CHECK(levels >= 2 && levels <= 16, "--strata '", spec, "': K must be from 2 to 16");
    return levels;
}

int run_mix(MixArgs& a) {
    for (const std::string& s : a.sources) a.opt.sources.push_back(curate::parse_mix_source(s));
    a.opt.unit = curate::doc_unit(a.unit);
    a.opt.levels = difficulty_levels(a.strata);
    SYSLM_CHECK(a.search.empty() || a.search == "regmix", "--search '", a.search,
                "': the one method is regmix");
    if (!a.search.empty()) {
        a.opt.search_runs = a.runs;
        a.opt.proxy = curate::parse_proxy(a.proxy);
    }
    const io::GGUFFile gguf(a.opt.data.tokenizer_path);
    const auto tok = tokenizer::Tokenizer::from_gguf(gguf);
    const curate::MixResult r = curate::mix_data(a.opt, tok);
    std::printf("%s: mixture of %llu train tokens, %llu val tokens (every stratum's val)\n",
                a.opt.data.out_dir.c_str(), static_cast<unsigned long long>(r.meta.train_tokens),
                static_cast<unsigned long long>(r.meta.val_tokens));
    std::printf("%-24s %8s %8s %12s %12s %8s %s\n", "stratum", "weight", "docs", "train tok",
                "in mixture", "repeats", "perplexity");
    for (const curate::Stratum& s : r.strata) {
        std::printf("%-24s %8.4f %8llu %12llu %12llu %8.2f", s.name.c_str(), s.weight,
                    static_cast<unsigned long long>(s.docs),
                    static_cast<unsigned long long>(s.train_tokens),
                    static_cast<unsigned long long>(s.mixed_tokens), s.repeats());
        if (a.opt.levels > 0) std::printf(" %.2f-%.2f", s.ppl_min, s.ppl_max);
        std::printf("\n");
    }
    if (!r.runs.empty())
        std::printf(
            "search: %zu proxy runs; fit R^2 %.3f, leave-one-out RMSE %.4f; predicted val "
            "loss %.4f chosen, %.4f uniform, %.4f natural (the weights above are the "
            "choice)\n",
            r.runs.size(), r.fit.r2, r.fit.loo_rmse, r.predicted_chosen, r.predicted_uniform,
            r.predicted_natural);
    if (!a.report.empty()) {
        curate::write_mixture_report(a.opt, r, a.report);
        std::printf("report: %s\n", a.report.c_str());
    }
    return 0;
}

}  // namespace

std::pair<CLI::App*, std::function<int()>> add_data_mix(CLI::App& data) {
    CLI::App* app = data.add_subcommand(
        "mix",
        "Strata (sources, difficulty levels by perplexity) as data sets of their own and a "
        "weighted training mixture of them");
    auto a = std::make_shared<MixArgs>();
    app->add_option("--source", a->sources,
                    "NAME=PATH[:WEIGHT]: a file or directory of text and its relative weight "
                    "(default 1); repeat for more")
        ->required();
    app->add_option("--tokenizer", a->opt.data.tokenizer_path,
                    "GGUF file with the tokenizer (a model or a tokenizer-only file)")
        ->required()
        ->check(CLI::ExistingFile);
    app->add_option("-o,--out", a->opt.data.out_dir, "Output directory (created if missing)")
        ->required();
    app->add_option("--val", a->opt.data.val_fraction, "Fraction of each stratum held out")
        ->capture_default_str()
        ->check(finite_in(0.0, 0.5));
    app->add_option("--docs", a->unit,
                    "What a document is: blank, line, file or percent (fortune files)")
        ->capture_default_str()
        ->check(CLI::IsMember({"line", "blank", "file", "percent"}));
    app->add_option("--tokens", a->opt.train_tokens,
                    "Train tokens of the mixture (default: as many as the strata hold)");
    app->add_option("--seed", a->opt.seed, "Seed of the chunks' order")->capture_default_str();
    app->add_option("--strata", a->strata,
                    "difficulty:K = K levels per source by perplexity (needs --scores)");
    app->add_option("--scores", a->opt.scores_path,
                    "JSON lines of `syslm data score` for the same files and --docs")
        ->check(CLI::ExistingFile);
    app->add_option("--search", a->search,
                    "regmix: choose the weights by proxy runs (RegMix); the sources' weights are "
                    "then ignored")
        ->check(CLI::IsMember({"regmix"}));
    app->add_option("--proxy", a->proxy,
                    "The proxy model and run: layers=2,dim=128,heads=4,steps=300,seq=64,batch=8,"
                    "lr=0.002 (any subset)");
    app->add_option("--runs", a->runs, "Proxy runs of the search")
        ->capture_default_str()
        ->check(CLI::Range(3, 1000));
    app->add_option("-t,--threads", a->opt.threads, "Threads of each proxy run (default: all)");
    app->add_option("--report", a->report,
                    "HTML page: the strata, the weights, the search's runs and fit");
    app->add_option("--chunk-tokens", a->opt.data.chunk_tokens,
                    "Granularity of the val split and of the mixture's draws")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app->add_option("--shard-tokens", a->opt.data.shard_tokens, "Most tokens per shard file")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app->footer(
        "Writes OUT/strata/<stratum>/ (a prepared data set each), the mixture as OUT/train_*.bin "
        "with every stratum's val as OUT/val_*.bin and OUT/meta.json (for syslm train --data), "
        "and OUT/mixture.json.\n"
        "Example: syslm data mix --source bible=kjv.txt:0.6 --source fortunes=fortunes/:0.4 "
        "--docs blank --tokenizer tok.gguf -o data/mix");
    return {app, [a] { return run_mix(*a); }};
}

}  // namespace syslm::cli
