// Pre-tokenization of byte-level BPE vocabularies: text is cut into words with the regexes of
// the model family (`tokenizer.ggml.pre`) before merges run inside each word.
//
// A family has one or more regexes applied in sequence, as llama.cpp does: each regex splits every
// piece left by the previous one, and both the matches and the gaps between them become pieces
// (HF tokenizers' Split with behaviour "isolated"). Each piece is matched as a whole subject, so
// `$` and `(?!\S)` see the end of the piece. Matching uses PCRE2 with UTF and UCP (Unicode
// properties); `\s` is rewritten to the Unicode White_Space set that HF tokenizers and llama.cpp
// use (PCRE2's own `\s` also matches U+180E). Bytes that are not valid UTF-8 never match and end
// up in gap pieces, so nothing is lost.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace syslm::tokenizer {

struct PreTokenizerConfig {
    std::string name;                  // canonical family name
    std::vector<std::string> regexes;  // PCRE2 syntax, applied in sequence
    bool ignore_merges = false;        // a word that is itself a token skips the merges (llama3)
    bool add_bos = false;              // default of add_bos before tokenizer.ggml.add_bos_token
    bool no_bos = false;               // the family has no BOS token (chatglm)
};

// The configuration for a `tokenizer.ggml.pre` value (aliases included, e.g. "llama-bpe",
// "deepseek-r1-qwen"); nullptr when the name is unknown.
const PreTokenizerConfig* find_pre_tokenizer(std::string_view pre);
std::vector<std::string> known_pre_tokenizer_names();

class PreTokenizer {
public:
    // Compiles the regexes; throws Error naming the regex and the PCRE2 message if one is bad.
    explicit PreTokenizer(std::vector<std::string> regexes);
    ~PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;

    // Appends the pieces of `text` (views into it, in order, covering it exactly) to `out`.
    // Thread-safe: the compiled regexes are shared read-only.
    void split(std::string_view text, std::vector<std::string_view>& out) const;

    const std::vector<std::string>& regexes() const { return regexes_; }

private:
    struct Compiled;
    std::vector<std::string> regexes_;
    std::vector<std::unique_ptr<Compiled>> compiled_;
};

// Rewrites `\s` / `\S` into explicit Unicode White_Space classes (exposed for tests).
std::string rewrite_whitespace_classes(std::string_view regex);

}  // namespace syslm::tokenizer
