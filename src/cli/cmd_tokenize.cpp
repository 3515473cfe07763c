// syslm tokenize: print the tokens of a text with the tokenizer of a GGUF file (a model or a
// vocabulary-only file), like llama.cpp's llama-tokenize.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::cli {
namespace {

struct TokenizeArgs {
    std::string model, prompt, file;
    bool no_bos = false;
    bool ids_only = false;
    bool parse_special = false;
    bool timing = false;
};

std::string read_input(const std::string& path) {
    std::stringstream ss;
    if (path == "-") {
        ss << std::cin.rdbuf();
    } else {
        std::ifstream in(path, std::ios::binary);
        SYSLM_CHECK(in, path, ": cannot open the text file");
        ss << in.rdbuf();
    }
    return ss.str();
}

int run_tokenize(const TokenizeArgs& a) {
    const std::string text = a.file.empty() ? a.prompt : read_input(a.file);
    const io::GGUFFile gguf(a.model);
    const auto tok = tokenizer::Tokenizer::from_gguf(gguf);

    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok.encode(text, !a.no_bos, a.parse_special);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::string out;
    if (a.ids_only) {
        out += '[';
        for (size_t i = 0; i < ids.size(); ++i) {
            if (i) out += ", ";
            out += std::to_string(ids[i]);
        }
        out += "]\n";
    } else {
        // The piece is printed as raw bytes: a token may hold part of a UTF-8 character.
        char num[16];
        for (int32_t id : ids) {
            std::snprintf(num, sizeof num, "%6d", id);
            out += cat(num, " -> '", tok.token_to_piece(id), "'\n");
        }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    if (a.timing)
        std::fprintf(stderr, "%zu tokens from %zu bytes in %.3f s (%.2f MB/s, %.0f tokens/s)\n",
                     ids.size(), text.size(), seconds, text.size() / 1e6 / std::max(seconds, 1e-9),
                     ids.size() / std::max(seconds, 1e-9));
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<TokenizeArgs>();
    app.add_option("-m,--model", a->model,
                   "GGUF file with a tokenizer (a model or a vocabulary-only file)")
        ->required()
        ->check(CLI::ExistingFile);
    auto* p = app.add_option("-p,--prompt", a->prompt, "Text to tokenize");
    auto* f = app.add_option("-f,--file", a->file, "Read the text from a file ('-' = stdin)")
                  ->excludes(p);
    p->excludes(f);
    app.add_flag("--no-bos", a->no_bos,
                 "Do not add BOS/EOS (by default they are added when the vocabulary's "
                 "add_bos_token/add_eos_token flags say so)");
    app.add_flag("--ids", a->ids_only, "Print only the ids, as [1, 2, 3]");
    app.add_flag("--parse-special", a->parse_special,
                 "Turn the text of control tokens (e.g. <|im_start|>, <s>) into those tokens; "
                 "by default it is tokenized as plain text");
    app.add_flag("--timing", a->timing, "Print the token count and tokenizer speed to stderr");
    app.footer(
        "Default output: one line per token, 'ID -> 'PIECE''. Exactly one of -p and -f is "
        "needed.\nExample: syslm tokenize -m model.gguf -f text.txt --no-bos --ids");
    return [a, p, f] {
        SYSLM_CHECK(p->count() + f->count() == 1,
                    "tokenize: give the text with -p TEXT or -f FILE");
        return run_tokenize(*a);
    };
}

SYSLM_COMMAND(tokenize, "tokenize", "Print the token ids of a text (llama-tokenize)", setup);

}  // namespace
}  // namespace syslm::cli
