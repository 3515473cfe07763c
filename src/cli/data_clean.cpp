#include "cli/data_clean.hpp"

#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "core/error.hpp"
#include "curate/clean.hpp"

namespace syslm::cli {

std::pair<CLI::App*, std::function<int()>> add_data_clean(CLI::App& data) {
    CLI::App* app = data.add_subcommand(
        "clean",
        "Drop low-quality documents (Gopher / C4 rules), exact and near duplicates (MinHash + "
        "LSH) and repeated spans (suffix array) from text files");
    auto o = std::make_shared<curate::CleanOptions>();
    auto unit = std::make_shared<std::string>("blank");
    auto dedup =
        std::make_shared<std::vector<std::string>>(std::vector<std::string>{"exact", "minhash"});
    app->add_option("-f,--file", o->inputs, "Text file or directory (repeat for more)")->required();
    app->add_option("-o,--out", o->out_dir,
                    "Output directory: the kept documents of each input file, under its name")
        ->required();
    app->add_option("--docs", *unit,
                    "What a document is: blank = blocks between blank lines, line = each "
                    "non-empty line, file = each file, percent = blocks between lines of a lone "
                    "% (fortune files)")
        ->capture_default_str()
        ->check(CLI::IsMember({"line", "blank", "file", "percent"}));
    app->add_option("--dedup", *dedup,
                    "Dedup steps, in this order: exact, minhash, substring (repeated spans of "
                    "--substring-words words cut from later documents)")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::IsMember({"exact", "minhash", "substring"}));
    auto filters = std::make_shared<std::vector<std::string>>();
    auto filter_config = std::make_shared<std::string>();
    app->add_option("--filters", *filters,
                    "Quality rules applied first: heuristic (Gopher's and C4's rules, "
                    "thresholds from --filter-config)")
        ->delimiter(',')
        ->check(CLI::IsMember({"heuristic"}));
    app->add_option("--filter-config", *filter_config,
                    "TOML file of heuristic thresholds (min_words = 50, max_digit_ratio = 0.2, "
                    "bad_substrings = [\"lorem ipsum\"], ...); unset keys keep Gopher's values")
        ->check(CLI::ExistingFile);
    auto lang_model = std::make_shared<std::string>();
    app->add_option("--lang", o->lang,
                    "Keep only documents the --lang-model identifier gives this language");
    app->add_option("--lang-model", *lang_model, "A `syslm data langid` identifier (GGUF)")
        ->check(CLI::ExistingFile);
    app->add_option("--min-lang-prob", o->min_lang_prob,
                    "--lang: the identifier's least probability for the language")
        ->capture_default_str()
        ->check(finite_in(0.0, 1.0));
    auto quality_model = std::make_shared<std::string>();
    app->add_option("--quality-model", *quality_model,
                    "A `syslm data classify train` model: drop documents it gives P(good) under "
                    "--min-quality")
        ->check(CLI::ExistingFile);
    app->add_option("--min-quality", o->min_quality, "--quality-model: the least P(good)")
        ->capture_default_str()
        ->check(finite_in(0.0, 1.0));
    auto scores = std::make_shared<std::string>();
    app->add_option("--scores", *scores,
                    "JSON lines of `syslm data score` for the same files and --docs (with "
                    "--max-ppl)")
        ->check(CLI::ExistingFile);
    app->add_option("--max-ppl", o->max_ppl,
                    "Drop documents whose perplexity in --scores is above this (CCNet's filter)")
        ->check(CLI::PositiveNumber);
    auto substring_words = std::make_shared<int>(50);
    app->add_option("--substring-words", *substring_words,
                    "Substring dedup: the shortest repeated span cut, in words")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    curate::MinHashParams& m = o->minhash;
    app->add_option("--shingle", m.shingle, "MinHash: words per shingle")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    app->add_option("--perm", m.perm, "MinHash: permutations (signature length)")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app->add_option("--bands", m.bands, "LSH: bands (bands x rows <= perm)")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app->add_option("--rows", m.rows, "LSH: rows per band")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app->add_option("--threshold", m.threshold,
                    "Estimated Jaccard similarity a candidate pair needs to count as duplicates "
                    "(0: every LSH candidate does)")
        ->capture_default_str()
        ->check(finite_in(0.0, 1.0));
    app->add_option("--seed", m.seed, "MinHash permutations' seed")->capture_default_str();
    app->add_option("--clusters", o->clusters,
                    "Write each document's cluster as JSON lines: id, file, cluster (its first "
                    "document), step (kept / exact / near)");
    app->add_option("--report", o->report,
                    "Write an HTML page: what each step removed and why, with examples");
    app->add_option("-t,--threads", o->threads, "Threads (default: all cores)")
        ->check(CLI::Range(0, 4096));
    app->footer(
        "LSH makes a pair of Jaccard similarity s a candidate with probability\n"
        "1 - (1 - s^rows)^bands; the curve is steepest near (1/bands)^(1/rows) (16 x 8: 0.71).\n"
        "Example: syslm data clean -f raw/ -o clean/ --dedup exact,minhash --threshold 0.8");
    auto run = [o, unit, dedup, substring_words, filters, filter_config, lang_model, scores,
                quality_model] {
        if (!quality_model->empty())
            o->quality = curate::NgramClassifier::load(*quality_model, "quality");
        usage_check(scores->empty() == (o->max_ppl == 0),
                    "data clean: --scores and --max-ppl go together");
        if (!scores->empty()) o->scores.emplace(*scores);
        usage_check(o->lang.empty() == lang_model->empty(),
                    "data clean: --lang and --lang-model go together");
        if (!lang_model->empty()) {
            o->langid = curate::NgramClassifier::load(*lang_model);
            const auto& labels = o->langid->labels();
            usage_check(std::find(labels.begin(), labels.end(), o->lang) != labels.end(),
                        "data clean: --lang ", o->lang, ": ", *lang_model,
                        " does not know that language");
        }
        usage_check(filter_config->empty() || !filters->empty(),
                    "data clean: --filter-config needs --filters heuristic");
        if (!filters->empty())
            o->filters = filter_config->empty()
                             ? curate::HeuristicFilters{}
                             : curate::HeuristicFilters::from_toml(*filter_config);
        o->unit = curate::doc_unit(*unit);
        o->exact = std::find(dedup->begin(), dedup->end(), "exact") != dedup->end();
        o->near = std::find(dedup->begin(), dedup->end(), "minhash") != dedup->end();
        const bool sub = std::find(dedup->begin(), dedup->end(), "substring") != dedup->end();
        o->substring_words = sub ? *substring_words : 0;
        curate::check(o->minhash);
        const curate::CleanReport r = curate::clean(*o);
        std::printf(
            "%s: %lld documents, kept %lld (%.1f%%): %lld exact and %lld near duplicates removed "
            "(%lld candidate pairs verified; LSH threshold %.2f); %lld words of repeated spans "
            "cut (%lld documents emptied); %.2f -> %.2f MB in %.2f s\n",
            o->out_dir.c_str(), static_cast<long long>(r.documents), static_cast<long long>(r.kept),
            100.0 * r.kept / std::max<int64_t>(1, r.documents),
            static_cast<long long>(r.exact_duplicates), static_cast<long long>(r.near_duplicates),
            static_cast<long long>(r.candidate_pairs),
            curate::lsh_threshold(o->minhash.bands, o->minhash.rows),
            static_cast<long long>(r.substring_words), static_cast<long long>(r.emptied),
            r.bytes_in / 1e6, r.bytes_out / 1e6, r.seconds);
        if (!r.skipped.empty()) std::printf("  %s\n", r.skipped.c_str());
        for (const auto& [rule, n] : r.filtered)
            std::printf("  dropped by %s: %lld documents\n", rule.c_str(),
                        static_cast<long long>(n));
        return 0;
    };
    return {app, run};
}

}  // namespace syslm::cli
