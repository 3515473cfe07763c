// syslm data prepare: tokenize text files into train/val token shards for `syslm train`; data
// clean (cli/data_clean.cpp) removes duplicate documents first
// (data/prepare.hpp has the document, separator and split rules; data/shards.hpp the format).
#include <algorithm>
#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "cli/data_augment.hpp"
#include "cli/data_clean.hpp"
#include "cli/data_langid.hpp"
#include "cli/data_mix.hpp"
#include "cli/data_score.hpp"
#include "cli/option_checks.hpp"
#include "core/error.hpp"
#include "data/prepare.hpp"
#include "io/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::cli {
namespace {

int run_prepare(const data::PrepareOptions& opt) {
    const io::GGUFFile gguf(opt.tokenizer_path);
    const auto tok = tokenizer::Tokenizer::from_gguf(gguf);
    const auto st =
        data::prepare_data(opt, tok, [](const std::string& path, uint64_t bytes, uint64_t tokens) {
            std::fprintf(stderr, "%s: %.2f MB -> %llu tokens\n", path.c_str(), bytes / 1e6,
                         static_cast<unsigned long long>(tokens));
        });
    for (const std::string& path : st.skipped_binary)
        std::fprintf(stderr, "%s: a binary file (a NUL byte in its first 8 KiB): skipped\n",
                     path.c_str());
    if (st.skipped_invalid_utf8 > 0)
        std::fprintf(stderr, "skipped %lld documents that are not valid UTF-8\n",
                     static_cast<long long>(st.skipped_invalid_utf8));
    const auto& m = st.meta;
    const uint64_t total = m.train_tokens + m.val_tokens;
    std::printf("%s: %llu documents, %llu tokens (%s, vocabulary %u, separator %d)\n",
                opt.out_dir.c_str(), static_cast<unsigned long long>(st.n_docs),
                static_cast<unsigned long long>(total), data::dtype_name(m.dtype), m.n_vocab,
                m.separator);
    std::printf("  train: %llu tokens in %zu shard(s)\n",
                static_cast<unsigned long long>(m.train_tokens), m.train_shards.size());
    std::printf("  val:   %llu tokens in %zu shard(s)\n",
                static_cast<unsigned long long>(m.val_tokens), m.val_shards.size());
    std::printf("  %.2f s, %.0f tokens/s (tokenizer alone %.0f tokens/s, %.2f MB/s)\n", st.seconds,
                total / std::max(st.seconds, 1e-9), total / std::max(st.tokenize_seconds, 1e-9),
                st.n_bytes / 1e6 / std::max(st.tokenize_seconds, 1e-9));
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    app.require_subcommand(1);
    CLI::App* prep = app.add_subcommand(
        "prepare", "Tokenize text files into train/val token shards and meta.json");
    auto o = std::make_shared<data::PrepareOptions>();
    prep->add_option("-f,--file", o->inputs, "Text file (repeat for more)")
        ->required()
        ->check(CLI::ExistingFile);
    prep->add_option("--tokenizer", o->tokenizer_path,
                     "GGUF file with the tokenizer (a model or a tokenizer-only file)")
        ->required()
        ->check(CLI::ExistingFile);
    prep->add_option("-o,--out", o->out_dir, "Output directory (created if missing)")->required();
    prep->add_option("--val", o->val_fraction,
                     "Fraction of the tokens for the validation split (0 = none)")
        ->capture_default_str()
        ->check(finite_in(0.0, 0.5));
    prep->add_option("--shard-tokens", o->shard_tokens, "Most tokens per shard file")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    prep->add_option("--chunk-tokens", o->chunk_tokens,
                     "Granularity of the train/val split: every 1/val-th chunk of this many "
                     "tokens goes to val")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    auto docs = std::make_shared<std::string>("blank");
    prep->add_option("--docs", *docs,
                     "What a document is (each gets a separator token before it): line = each "
                     "non-empty line, blank = blocks between blank lines, file = each file")
        ->capture_default_str()
        ->check(CLI::IsMember({"line", "blank", "file"}));
    prep->footer(
        "Writes OUT/train_000.bin..., OUT/val_000.bin... and OUT/meta.json.\n"
        "Example: syslm data prepare -f kjv.txt --tokenizer tok.gguf -o data/kjv --val 0.02");
    const auto [clean, run_clean] = add_data_clean(app);
    const auto [score, run_score] = add_data_score(app);
    const auto [langid, run_langid] = add_data_langid(app);
    const auto [mix, run_mix] = add_data_mix(app);
    const auto [classify, run_classify] = add_data_classify(app);
    const auto [augment, run_augment] = add_data_augment(app);
    return [o, docs, prep, clean, run_clean, score, run_score, langid, run_langid, mix, run_mix,
            classify, run_classify, augment, run_augment] {
        if (classify->parsed()) return run_classify();
        if (augment->parsed()) return run_augment();
        if (clean->parsed()) return run_clean();
        if (score->parsed()) return run_score();
        if (langid->parsed()) return run_langid();
        if (mix->parsed()) return run_mix();
        SYSLM_CHECK(
            prep->parsed(),
            "data: give a subcommand (prepare, clean, score, langid, classify, augment, mix)");
        o->docs = *docs == "line"   ? data::DocMode::Line
                  : *docs == "file" ? data::DocMode::File
                                    : data::DocMode::Blank;
        return run_prepare(*o);
    };
}

SYSLM_COMMAND(data, "data",
              "Prepare training data: token shards (data prepare), cleaning (data clean), "
              "perplexity scores (data score), language identification (data langid), a quality "
              "classifier (data classify), augmented copies (data augment), strata and mixtures "
              "(data mix)",
              setup);

}  // namespace
}  // namespace syslm::cli
