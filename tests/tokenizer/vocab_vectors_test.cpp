// llama.cpp's tokenizer test vectors: tests/fixtures/vocab/<name>.gguf with <name>.gguf.inp (texts
// separated by "\n__ggml_vocab_test__\n") and <name>.gguf.out (one line of expected ids per text,
// produced by HF tokenizers; no BOS, special-token text as plain text).
//
// Every vocabulary in the folder is tested. SYSLM_EXTRA_VOCAB_DIRS (':'-separated) adds folders
// of the same layout, e.g. llama.cpp's models/ for more pre-tokenizer families.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using syslm::tokenizer::Tokenizer;

namespace {

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + p.string());
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

struct Case {
    std::string text;
    std::vector<int32_t> ids;
};

std::vector<Case> read_cases(const fs::path& gguf) {
    const std::string inp = read_file(gguf.string() + ".inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    for (size_t pos = 0; pos < inp.size();) {
        const size_t next = inp.find(sep, pos);
        if (next == std::string::npos) {
            texts.push_back(inp.substr(pos));
            break;
        }
        texts.push_back(inp.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::ifstream out(gguf.string() + ".out");
    std::vector<Case> cases;
    std::string line;
    for (size_t i = 0; std::getline(out, line); ++i) {
        if (i >= texts.size()) throw std::runtime_error(gguf.string() + ".out has more lines");
        Case c{texts[i], {}};
        std::istringstream ids(line);
        for (int32_t id; ids >> id;) c.ids.push_back(id);
        cases.push_back(std::move(c));
    }
    if (cases.size() != texts.size())
        throw std::runtime_error(gguf.string() + ": .inp and .out hold different numbers of cases");
    return cases;
}

std::vector<fs::path> vocab_files() {
    std::vector<fs::path> dirs{fs::path(SYSLM_VOCAB_DIR)};
    if (const char* extra = std::getenv("SYSLM_EXTRA_VOCAB_DIRS")) {
        std::stringstream ss(extra);
        for (std::string d; std::getline(ss, d, ':');)
            if (!d.empty()) dirs.emplace_back(d);
    }
    std::vector<fs::path> files;
    for (const auto& dir : dirs) {
        if (!fs::is_directory(dir)) continue;
        for (const auto& e : fs::directory_iterator(dir)) {
            const fs::path p = e.path();
            if (p.extension() == ".gguf" && fs::exists(p.string() + ".inp") &&
                fs::exists(p.string() + ".out"))
                files.push_back(p);
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::string show(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) {
        s += ' ';
        s += std::to_string(id);
    }
    return s;
}

}  // namespace

TEST(VocabVectors, SharedVocabulariesArePresent) {
    // The two vocabularies of tests/fixtures/vocab must be found, so the tests below cannot pass
    // vacuously.
    const auto files = vocab_files();
    int found = 0;
    for (const auto& f : files)
        if (f.filename() == "ggml-vocab-gpt-2.gguf" || f.filename() == "ggml-vocab-llama-spm.gguf")
            ++found;
    EXPECT_EQ(found, 2) << "expected the gpt-2 and llama-spm vocabularies in " << SYSLM_VOCAB_DIR;
}

TEST(VocabVectors, EveryCaseMatches) {
    for (const fs::path& file : vocab_files()) {
        SCOPED_TRACE(file.string());
        const syslm::io::GGUFFile gguf(file.string());
        ASSERT_TRUE(gguf.tensors().empty()) << "expected a vocabulary-only file";
        const Tokenizer tok = Tokenizer::from_gguf(gguf);
        const auto cases = read_cases(file);
        ASSERT_GT(cases.size(), 20u);
        int failed = 0;
        for (const Case& c : cases) {
            const auto ids = tok.encode(c.text, /*add_special=*/false, /*parse_special=*/false);
            if (ids != c.ids) {
                ++failed;
                ADD_FAILURE() << "text '" << c.text << "'\n  expected" << show(c.ids)
                              << "\n  got     " << show(ids);
            }
        }
        std::printf("%s: %zu cases, %d failed\n", file.filename().c_str(), cases.size(), failed);
    }
}
