// A vocabulary-only GGUF of tokenizer::byte_fallback_vocab, for commands that build a model from a
// vocabulary size alone (`train --arch ... --vocab N --synthetic-data`, `init --vocab-size N`).
#pragma once

#include <string>

namespace syslm::cli {

// Writes the file at `path` (atomically) and returns `path`.
std::string write_byte_fallback_vocab(int n_tokens, const std::string& path);

}  // namespace syslm::cli
