#include "cli/data_score.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "curate/documents.hpp"
#include "curate/score.hpp"

namespace syslm::cli {

namespace {

struct ScoreArgs {
    std::string model, out, unit = "blank";
    std::vector<std::string> inputs;
    int n_ctx = 512, threads = 0;
};

int run_score(const ScoreArgs& a) {
    curate::PerplexityScorer scorer(a.model, a.n_ctx, a.threads);
    curate::DocumentReader reader(curate::input_files(a.inputs), curate::doc_unit(a.unit));
    std::ofstream out(a.out);
    SYSLM_CHECK(out, a.out, ": cannot write");
    curate::Document doc;
    std::vector<double> ppl;
    while (reader.next(doc)) {
        const curate::DocumentScore s = scorer.score(doc.text);
        out << nlohmann::json{{"id", doc.id},
                              {"file", reader.files()[static_cast<size_t>(doc.file)]},
                              {"tokens", s.tokens},
                              {"ppl", s.ppl()}}
                   .dump()
            << "\n";
        if (s.tokens > 0) ppl.push_back(s.ppl());
    }
    SYSLM_CHECK(out.good(), a.out, ": write failed");
    if (!reader.skipped().summary().empty())
        std::fprintf(stderr, "data score: %s\n", reader.skipped().summary().c_str());
    std::sort(ppl.begin(), ppl.end());
    auto q = [&](double f) {
        return ppl.empty() ? 0 : ppl[static_cast<size_t>(f * (ppl.size() - 1))];
    };
    std::printf("%s: %zu documents scored; perplexity quartiles %.2f / %.2f / %.2f\n",
                a.out.c_str(), ppl.size(), q(0.25), q(0.5), q(0.75));
    return 0;
}

}  // namespace

std::pair<CLI::App*, std::function<int()>> add_data_score(CLI::App& data) {
    CLI::App* app = data.add_subcommand(
        "score",
        "Perplexity of each document under a model (CCNet's quality signal), as JSON lines");
    auto a = std::make_shared<ScoreArgs>();
    app->add_option("-m,--model", a->model, "GGUF model that scores")
        ->required()
        ->check(CLI::ExistingFile);
    app->add_option("-f,--file", a->inputs, "Text file or directory (repeat for more)")->required();
    app->add_option("-o,--out", a->out, "JSON lines: id, file, tokens, ppl per document")
        ->required();
    app->add_option("--docs", a->unit,
                    "What a document is: blank, line, file or percent (fortune files)")
        ->capture_default_str()
        ->check(CLI::IsMember({"line", "blank", "file", "percent"}));
    app->add_option("-c,--ctx-size", a->n_ctx, "Window: longer documents are scored in windows")
        ->capture_default_str()
        ->check(CLI::Range(2, 1 << 20));
    app->add_option("-t,--threads", a->threads, "Threads (default: all cores)")
        ->check(CLI::Range(0, 4096));
    return {app, [a] { return run_score(*a); }};
}

}  // namespace syslm::cli
