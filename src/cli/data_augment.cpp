// syslm data augment: copies of the documents changed by each method, under OUT/<method>/ (one
// file per input, the input's layout), and OUT/augment.jsonl with every copy's edits. The
// folder is the tag: `data mix --source synonym=OUT/synonym:0.1` makes the copies a stratum, and
// `train --stratum-lr synonym=0.5` weights them.
#include "cli/data_augment.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/option_checks.hpp"
#include "core/error.hpp"
#include "curate/documents.hpp"
#include "curate/infill.hpp"
#include "curate/normalize.hpp"
#include "curate/synonyms.hpp"

namespace syslm::cli {

namespace {

namespace fs = std::filesystem;

struct AugmentArgs {
    std::vector<std::string> inputs;
    std::string out, methods = "synonym", model, wordnet = "/usr/share/wordnet", unit = "blank";
    curate::InfillOptions infill;
    uint64_t seed = 1;
};

std::vector<std::string> parse_methods(const AugmentArgs& a) {
    std::vector<std::string> out;
    std::stringstream in(a.methods);
    for (std::string m; std::getline(in, m, ',');) {
        SYSLM_CHECK(m != "backtranslation" && m != "back-translation",
                    "data augment: back-translation needs a pair of translation models (e.g. "
                    "English->German and back); syslm cannot download them and ships none, so "
                    "it offers no back-translation rather than a pretend one");
        SYSLM_CHECK(m == "synonym" || m == "infill", "data augment: unknown method '", m,
                    "' (synonym, infill)");
        SYSLM_CHECK(m != "infill" || !a.model.empty(),
                    "data augment: infill needs a model (--model m.gguf)");
        out.push_back(m);
    }
    SYSLM_CHECK(!out.empty(), "data augment: --methods names none");
    return out;
}

// One method's output file, counts and time.
struct Method {
    std::string name;
    std::ofstream out;
    int64_t docs = 0, copies = 0, edits = 0, units = 0;  // units: eligible words or spans
    double seconds = 0;
    void print(const std::string& dir) const {
        std::printf(
            "%s: %lld documents, %lld copies written to %s/%s, %lld edits (%lld %s), "
            "%.2f s\n",
            name.c_str(), static_cast<long long>(docs), static_cast<long long>(copies), dir.c_str(),
            name.c_str(), static_cast<long long>(edits), static_cast<long long>(units),
            name == "synonym" ? "eligible words" : "spans filled", seconds);
    }
};

class Augmenter {
public:
    explicit Augmenter(const AugmentArgs& a) : a_(a) {
        for (const std::string& name : parse_methods(a)) {
            if (name == "synonym") {
                wordnet_.emplace(a.wordnet);
                synonyms_.emplace(*wordnet_, a.infill.rate);
            } else {
                infiller_ = std::make_unique<curate::SpanInfiller>(a.model, a.infill);
            }
            fs::create_directories(fs::path(a.out) / name);
            methods_.push_back(Method{name, {}});
        }
        manifest_.open(manifest_path());
        SYSLM_CHECK(manifest_, manifest_path(), ": cannot write");
    }

    // Each method's copy of `doc`, when it changed anything; `new_file` opens the outputs.
    void augment(const curate::Document& doc, const std::string& file, bool new_file,
                 const char* separator) {
        for (Method& m : methods_) {
            if (new_file) {
                const fs::path p = fs::path(a_.out) / m.name / fs::path(file).filename();
                m.out.close();
                m.out.open(p, std::ios::binary | std::ios::trunc);
                SYSLM_CHECK(m.out, p.string(), ": cannot write");
            }
            const auto t0 = std::chrono::steady_clock::now();
            // Each (seed, document, method) draws on its own: a copy does not depend on others.
            const uint64_t seed =
                curate::hash_bytes(m.name, a_.seed ^ (static_cast<uint64_t>(doc.id) << 20));
            const std::vector<curate::Edit> edits = m.name == "synonym"
                                                        ? synonyms_->edits(doc.text, seed, m.units)
                                                        : infiller_->edits(doc.text, seed, m.units);
            m.seconds +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            ++m.docs;
            if (edits.empty()) continue;  // an unchanged copy would only be a duplicate
            m.out << curate::apply_edits(doc.text, edits) << separator;
            ++m.copies;
            m.edits += static_cast<int64_t>(edits.size());
            nlohmann::json e = nlohmann::json::array();
            for (const curate::Edit& x : edits)
                e.push_back({{"at", x.at}, {"from", x.from}, {"to", x.to}});
            manifest_ << nlohmann::json{{"id", doc.id},
                                        {"file", file},
                                        {"method", m.name},
                                        {"edits", e}}
                             .dump()
                      << "\n";
        }
    }

    void finish() {
        for (Method& m : methods_) {
            m.out.close();
            SYSLM_CHECK(!m.out.bad(), a_.out, "/", m.name, ": write failed");
        }
        manifest_.close();
        SYSLM_CHECK(!manifest_.bad(), manifest_path(), ": write failed");
        for (const Method& m : methods_) m.print(a_.out);
    }

private:
    std::string manifest_path() const { return (fs::path(a_.out) / "augment.jsonl").string(); }
    const AugmentArgs& a_;
    std::optional<curate::WordNet> wordnet_;
    std::optional<curate::SynonymReplacer> synonyms_;
    std::unique_ptr<curate::SpanInfiller> infiller_;
    std::vector<Method> methods_;
    std::ofstream manifest_;
};

int run_augment(const AugmentArgs& a) {
    Augmenter aug(a);
    const curate::DocUnit unit = curate::doc_unit(a.unit);
    const char* separator = unit == curate::DocUnit::Blank     ? "\n\n"
                            : unit == curate::DocUnit::Percent ? "\n%\n"
                                                               : "\n";
    curate::DocumentReader reader(curate::input_files(a.inputs), unit);
    curate::Document doc;
    int open_file = -1;
    while (reader.next(doc)) {
        aug.augment(doc, reader.files()[static_cast<size_t>(doc.file)], doc.file != open_file,
                    separator);
        open_file = doc.file;
    }
    if (!reader.skipped().summary().empty())
        std::fprintf(stderr, "data augment: %s\n", reader.skipped().summary().c_str());
    aug.finish();
    return 0;
}

}  // namespace

std::pair<CLI::App*, std::function<int()>> add_data_augment(CLI::App& data) {
    CLI::App* app = data.add_subcommand(
        "augment", "Augmented copies of documents: WordNet synonyms, span infilling by a model");
    auto a = std::make_shared<AugmentArgs>();
    app->add_option("-f,--file", a->inputs, "Text file or directory (repeat for more)")->required();
    app->add_option("-o,--out", a->out, "Output directory: OUT/<method>/, OUT/augment.jsonl")
        ->required();
    app->add_option("--methods", a->methods,
                    "Comma-separated: synonym (WordNet), infill (needs --model)")
        ->capture_default_str();
    app->add_option("-m,--model", a->model, "GGUF model that fills spans")
        ->check(CLI::ExistingFile);
    app->add_option(
           "--rate", a->infill.rate,
           "synonym: chance an eligible word is replaced; infill: share of tokens in spans")
        ->capture_default_str()
        ->check(finite_in(0.0, 1.0));
    app->add_option("--span", a->infill.span, "infill: tokens per span")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    app->add_option("--candidates", a->infill.candidates,
                    "infill: samples per span, one drawn by the right context's likelihood")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
    app->add_option("--right", a->infill.right, "infill: right-context tokens that weigh them")
        ->capture_default_str()
        ->check(CLI::Range(0, 256));
    app->add_option("-c,--ctx-size", a->infill.n_ctx, "infill: the model's window")
        ->capture_default_str()
        ->check(CLI::Range(16, 1 << 20));
    app->add_option("--wordnet", a->wordnet, "WordNet's database folder (Debian wordnet-base)")
        ->capture_default_str();
    app->add_option("--docs", a->unit,
                    "What a document is: blank, line, file or percent (fortune files)")
        ->capture_default_str()
        ->check(CLI::IsMember({"line", "blank", "file", "percent"}));
    app->add_option("--seed", a->seed, "Seed of every draw")->capture_default_str();
    app->add_option("-t,--threads", a->infill.threads, "infill: threads (default: all cores)")
        ->check(CLI::Range(0, 4096));
    app->footer(
        "Example: syslm data augment -f clean/ -o aug/ --methods synonym,infill -m m.gguf\n"
        "then:    syslm data mix --source text=clean/ --source synonym=aug/synonym:0.1 ...");
    return {app, [a] { return run_augment(*a); }};
}

}  // namespace syslm::cli
