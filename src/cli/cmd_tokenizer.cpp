// syslm tokenizer train: learn a byte-level BPE vocabulary (GPT-2 style) from text files and write
// it as a tokenizer-only GGUF file (tokenizer.ggml.* keys, as llama.cpp's vocabulary files).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/command.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "io/gguf.hpp"
#include "tokenizer/bpe_trainer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::cli {
namespace {

struct TrainArgs {
    std::vector<std::string> files;
    std::string output;
    size_t vocab = 8192;
    uint64_t min_frequency = 2;
    std::vector<std::string> special = {"<|endoftext|>"};
    bool no_special = false;
    std::string pre = "gpt-2";
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string read_file(const std::string& path) {
    std::string text = read_whole_file(path);
    SYSLM_CHECK(!text.empty(), path, ": the training text file is empty");
    return text;
}

int run_train(const TrainArgs& a) {
    tokenizer::BpeTrainerOptions opt;
    opt.vocab_size = a.vocab;
    opt.min_frequency = a.min_frequency;
    opt.special_tokens = a.no_special ? std::vector<std::string>{} : a.special;
    opt.pre = a.pre;
    tokenizer::BpeTrainer trainer(opt);  // checks the options before any file is read

    const auto t0 = std::chrono::steady_clock::now();
    // The texts are kept to measure the compression of the result on them afterwards.
    std::vector<std::string> texts;
    for (const auto& f : a.files) {
        texts.push_back(read_file(f));
        trainer.add_text(texts.back());
    }
    const auto& st = trainer.stats();
    const double t_count = seconds_since(t0);
    std::printf(
        "read %zu file(s), %.2f MB: %llu words (%llu distinct), %llu special tokens, "
        "in %.2f s\n",
        a.files.size(), st.text_bytes / 1e6, static_cast<unsigned long long>(st.words),
        static_cast<unsigned long long>(st.distinct_words),
        static_cast<unsigned long long>(st.special_occurrences), t_count);

    const auto t1 = std::chrono::steady_clock::now();
    const tokenizer::VocabSpec spec = trainer.train();
    const double t_train = seconds_since(t1);
    std::printf("learned %zu merges in %.2f s: %zu tokens (256 bytes + %zu merges + %zu special)\n",
                st.merges, t_train, spec.tokens.size(), st.merges, opt.special_tokens.size());
    if (st.stopped_early)
        std::printf(
            "note: stopped before %zu tokens: no pair of symbols occurs at least %llu "
            "times (lower --min-frequency or give more text)\n",
            a.vocab, static_cast<unsigned long long>(std::max<uint64_t>(a.min_frequency, 1)));

    tokenizer::write_tokenizer_gguf(spec, a.output);

    // Read the file back through the regular loader: this checks what was written and measures
    // the compression the way the tokenizer will be used (special tokens parsed).
    const io::GGUFFile gguf(a.output);
    const auto tok = tokenizer::Tokenizer::from_gguf(gguf);
    const auto t2 = std::chrono::steady_clock::now();
    uint64_t n_tokens = 0;
    for (const auto& t : texts) n_tokens += tok.encode(t, false, true).size();
    const double t_encode = seconds_since(t2);
    std::printf(
        "compression on the training text: %llu bytes -> %llu tokens, %.3f bytes per "
        "token (encoded in %.2f s)\n",
        static_cast<unsigned long long>(st.text_bytes), static_cast<unsigned long long>(n_tokens),
        static_cast<double>(st.text_bytes) / std::max<uint64_t>(n_tokens, 1), t_encode);
    std::printf("wrote %s (%d tokens, %zu merges) in %.2f s total\n", a.output.c_str(),
                tok.n_vocab(), st.merges, seconds_since(t0));
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    app.require_subcommand(1);
    auto a = std::make_shared<TrainArgs>();
    CLI::App* train = app.add_subcommand(
        "train", "Learn a byte-level BPE vocabulary (GPT-2 style) from text files");
    train->add_option("-f,--file", a->files, "Training text file (repeat for several files)")
        ->required()
        ->check(CLI::ExistingFile);
    train->add_option("-o,--output", a->output, "Output GGUF file (tokenizer only)")->required();
    train->add_option("--vocab", a->vocab, "Vocabulary size: 256 bytes + merges + specials")
        ->capture_default_str();
    train->add_option("--min-frequency", a->min_frequency, "Merge no pair seen fewer times")
        ->capture_default_str();
    CLI::Option* special = train->add_option(
        "--special", a->special, "Special (control) token, repeatable; the first is BOS/EOS");
    special->capture_default_str();
    train->add_flag("--no-special", a->no_special, "No special tokens at all")->excludes(special);
    train->add_option("--pre", a->pre, "Pre-tokenizer family (tokenizer.ggml.pre) to split words")
        ->capture_default_str();
    train->footer(
        "Example: syslm tokenizer train -f corpus.txt --vocab 8192 -o tok.gguf\n"
        "Merges the most frequent pair of symbols until the vocabulary has --vocab tokens, or no "
        "pair is seen --min-frequency times; ties go to the pair whose left, then right token "
        "text sorts first. Special tokens are cut out of the text before words are counted.");
    return [a, train] {
        SYSLM_CHECK(train->parsed(), "tokenizer: give a subcommand (train)");
        return run_train(*a);
    };
}

SYSLM_COMMAND(tokenizer, "tokenizer", "Train a tokenizer (tokenizer train)", setup);

}  // namespace
}  // namespace syslm::cli
