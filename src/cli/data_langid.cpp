#include "cli/data_langid.hpp"

#include <cstdio>
#include <map>
#include <memory>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "core/error.hpp"
#include "curate/documents.hpp"
#include "curate/ngram_classifier.hpp"

namespace syslm::cli {

namespace {

struct LangIdArgs {
    std::vector<std::string> train, test;  // LABEL=PATH
    std::string model, out, unit = "percent";
    double alpha = 0.1;
    bool json = false;
    std::string kind = "langid";  // or "quality" (data classify train)
};

// Every document of LANG=PATH items, labelled.
std::vector<curate::NgramClassifier::Sample> samples(const std::vector<std::string>& items,
                                                     const std::string& unit) {
    std::vector<curate::NgramClassifier::Sample> out;
    for (const std::string& item : items) {
        const size_t eq = item.find('=');
        usage_check(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), "data: '", item,
                    "' is not LABEL=PATH");
        const std::string label = item.substr(0, eq);
        curate::DocumentReader reader(curate::input_files({item.substr(eq + 1)}),
                                      curate::doc_unit(unit));
        curate::Document d;
        while (reader.next(d)) out.push_back({label, d.text});
    }
    return out;
}

int run_langid(const LangIdArgs& a) {
    usage_check(!a.train.empty() || !a.model.empty(), "data langid: give --train or -m");
    usage_check(!a.train.empty() == !a.out.empty(), "data langid: --train needs -o and -o --train");
    const curate::NgramClassifier m =
        a.train.empty() ? curate::NgramClassifier::load(a.model, a.kind)
                        : curate::NgramClassifier::train(samples(a.train, a.unit), a.alpha, a.kind);
    if (!a.out.empty()) {
        m.save(a.out);
        std::printf("%s: %zu labels\n", a.out.c_str(), m.labels().size());
    }
    if (a.test.empty()) return 0;
    std::map<std::string, std::pair<int64_t, int64_t>> per;  // label -> (right, all)
    int64_t right = 0, all = 0;
    for (const auto& s : samples(a.test, a.unit)) {
        const bool ok = m.predict(s.text).label == s.label;
        per[s.label].first += ok;
        ++per[s.label].second;
        right += ok;
        ++all;
    }
    nlohmann::json j{{"accuracy", static_cast<double>(right) / static_cast<double>(all)},
                     {"documents", all}};
    for (const auto& [label, c] : per) {
        std::printf("%-8s %6.2f%% of %lld\n", label.c_str(), 100.0 * c.first / c.second,
                    static_cast<long long>(c.second));
        j[a.kind == "langid" ? "per_language" : "per_label"][label] =
            static_cast<double>(c.first) / static_cast<double>(c.second);
    }
    std::printf("all      %6.2f%% of %lld\n", 100.0 * right / all, static_cast<long long>(all));
    if (a.json) std::printf("%s\n", j.dump().c_str());
    return 0;
}

}  // namespace

std::pair<CLI::App*, std::function<int()>> add_data_langid(CLI::App& data) {
    CLI::App* app = data.add_subcommand(
        "langid", "Train a byte n-gram language identifier and/or measure it on held-out text");
    auto a = std::make_shared<LangIdArgs>();
    app->add_option("--train", a->train, "LANG=PATH: text of that language (repeat)");
    app->add_option("--test", a->test, "LANG=PATH: held-out text to measure accuracy on (repeat)");
    app->add_option("-m,--model", a->model, "A trained identifier (GGUF), instead of --train")
        ->check(CLI::ExistingFile);
    app->add_option("-o,--out", a->out, "Where --train writes the identifier (GGUF)");
    app->add_option("--docs", a->unit,
                    "What a document is: percent (fortune files), blank, line or file")
        ->capture_default_str()
        ->check(CLI::IsMember({"line", "blank", "file", "percent"}));
    app->add_option("--alpha", a->alpha, "Additive smoothing of the n-gram counts")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app->add_flag("--json", a->json, "Last line: {accuracy, documents, per_language}");
    return {app, [a] { return run_langid(*a); }};
}

std::pair<CLI::App*, std::function<int()>> add_data_classify(CLI::App& data) {
    CLI::App* app = data.add_subcommand(
        "classify", "A document quality classifier (byte n-grams, naive Bayes): train, measure");
    CLI::App* train = app->add_subcommand(
        "train", "Train on good and bad examples (-o) and/or measure on held-out ones");
    app->require_subcommand(1);
    auto a = std::make_shared<LangIdArgs>();
    a->kind = "quality";
    a->unit = "blank";
    auto pos = std::make_shared<std::vector<std::string>>(),
         neg = std::make_shared<std::vector<std::string>>(),
         test_pos = std::make_shared<std::vector<std::string>>(),
         test_neg = std::make_shared<std::vector<std::string>>();
    train->add_option("--pos", *pos, "Files or directories of good text (repeat)");
    train->add_option("--neg", *neg, "Files or directories of bad text (repeat)");
    train->add_option("--test-pos", *test_pos, "Held-out good text to measure on (repeat)");
    train->add_option("--test-neg", *test_neg, "Held-out bad text to measure on (repeat)");
    train->add_option("-m,--model", a->model, "A trained classifier (GGUF), instead of --pos/--neg")
        ->check(CLI::ExistingFile);
    train->add_option("-o,--out", a->out, "Where the classifier is written (GGUF)");
    train->add_option("--docs", a->unit, "What a document is: blank, line, file or percent")
        ->capture_default_str()
        ->check(CLI::IsMember({"line", "blank", "file", "percent"}));
    train->add_option("--alpha", a->alpha, "Additive smoothing of the n-gram counts")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    train->add_flag("--json", a->json, "Last line: {accuracy, documents, per_label}");
    train->footer("Then: syslm data clean ... --quality-model quality.gguf [--min-quality 0.5]");
    return {
        app, [a, pos, neg, test_pos, test_neg] {
            usage_check(pos->empty() == neg->empty(),
                        "data classify train: --pos and --neg go together");
            for (const auto& [paths, label, out] :
                 {std::tuple{pos, "good", &a->train}, std::tuple{neg, "bad", &a->train},
                  std::tuple{test_pos, "good", &a->test}, std::tuple{test_neg, "bad", &a->test}})
                for (const std::string& p : *paths) out->push_back(label + ("=" + p));
            return run_langid(*a);
        }};
}

}  // namespace syslm::cli
