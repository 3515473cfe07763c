// Reading and writing the tokenizer keys of GGUF (llama.cpp's names, tokenizer.ggml.*).
#pragma once

#include "tokenizer/vocab.hpp"

namespace syslm::io {
class GGUFFile;
class GGUFWriter;
}  // namespace syslm::io

namespace syslm::tokenizer {

// Throws Error naming the file and key: tokenizer.ggml.model or .tokens absent, a model other
// than "llama" / "gpt2", arrays of the wrong type or length.
VocabSpec read_vocab_spec(const io::GGUFFile& file);

// Sets every key present in `spec` (a converter's job; also used by tests to build vocabularies).
void write_vocab_spec(io::GGUFWriter& writer, const VocabSpec& spec);

}  // namespace syslm::tokenizer
