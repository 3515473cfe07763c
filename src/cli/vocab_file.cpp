#include "cli/vocab_file.hpp"

#include "io/gguf.hpp"
#include "tokenizer/vocab.hpp"
#include "tokenizer/vocab_gguf.hpp"

namespace syslm::cli {

std::string write_byte_fallback_vocab(int n_tokens, const std::string& path) {
    io::GGUFWriter w;
    w.set("general.name", io::GGUFValue::string("byte-fallback vocabulary"));
    tokenizer::write_vocab_spec(w, tokenizer::byte_fallback_vocab(n_tokens));
    w.write(path);
    return path;
}

}  // namespace syslm::cli
