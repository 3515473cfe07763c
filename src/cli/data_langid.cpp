#include "cli/data_langid.hpp"

#include <cstdio>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "core/error.hpp"
#include "curate/documents.hpp"
#include "curate/langid.hpp"

namespace syslm::cli {

namespace {

struct LangIdArgs {
    std::vector<std::string> train, test;  // LANG=PATH
    std::string model, out, unit = "percent";
    double alpha = 0.1;
    bool json = false;
};

// Every document of LANG=PATH items, labelled.
std::vector<curate::LangId::Sample> samples(const std::vector<std::string>& items,
                                            const std::string& unit) {
    std::vector<curate::LangId::Sample> out;
    for (const std::string& item : items) {
        const size_t eq = item.find('=');
        usage_check(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), "data langid: '",
                    item, "' is not LANG=PATH");
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
    const curate::LangId m = a.train.empty()
                                 ? curate::LangId::load(a.model)
                                 : curate::LangId::train(samples(a.train, a.unit), a.alpha);
    if (!a.out.empty()) {
        m.save(a.out);
        std::printf("%s: %zu languages\n", a.out.c_str(), m.labels().size());
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
        j["per_language"][label] = static_cast<double>(c.first) / static_cast<double>(c.second);
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

}  // namespace syslm::cli
