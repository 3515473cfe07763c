// syslm::tokenizer — text <-> token ids from the tokenizer stored in a GGUF file.
//
// Two vocabulary types, as llama.cpp: SentencePiece-style (`tokenizer.ggml.model` = "llama",
// spm.hpp) and byte-level BPE ("gpt2", bpe.hpp + the regex pre-tokenizer of the model family
// named by `tokenizer.ggml.pre`, pre_tokenizer.hpp). Special tokens are split out first
// (special_split.hpp). Works on vocabulary-only GGUF files (no tensors).
//
// A Tokenizer is immutable after construction: copies share it and every method is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.hpp"

namespace syslm::io {
class GGUFFile;
}

namespace syslm::tokenizer {

class Tokenizer {
public:
    // Reads tokenizer.ggml.*; throws Error naming the file and the key when one is absent or bad.
    static Tokenizer from_gguf(const io::GGUFFile& file);
    static Tokenizer from_spec(VocabSpec spec);

    // add_special: prepend BOS / append EOS when the vocabulary's add_bos / add_eos flags say so.
    // parse_special: also split CONTROL tokens (e.g. "<|im_start|>", "<s>") out of `text`;
    // USER_DEFINED tokens are always split out. Any bytes are accepted, valid UTF-8 or not.
    std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

    // Detokenizes. Special tokens are rendered as their text unless `skip_special` (then CONTROL
    // and UNKNOWN tokens produce nothing). For SentencePiece vocabularies with add_space_prefix,
    // the space that encode() put before the text is removed again (also after a leading BOS).
    // Round trip: decode(encode(x, false, false)) == x for every byte string x with byte-level
    // BPE, and for every x without U+2581 (SentencePiece's space) with SentencePiece. With
    // parse_special, SentencePiece text right after a special token gains a space, as in
    // llama.cpp; vocabularies with strip flags (Phi-3) drop whitespace beside special tokens.
    std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

    // The bytes of one token for streaming output (SentencePiece's leading space kept; special
    // tokens as their text). May end inside a UTF-8 character: see Utf8StreamBuffer.
    const std::string& token_to_piece(int32_t id) const;
    const std::string& token_text(int32_t id) const;  // as stored in the vocabulary
    TokenType token_type(int32_t id) const;
    int32_t find_token(std::string_view text) const;  // exact vocabulary text -> id, or -1

    VocabType type() const;
    const std::string& pre() const;  // BPE pre-tokenizer family ("default" for SPM)
    int32_t n_vocab() const;
    int32_t bos() const;  // -1 if none
    int32_t eos() const;
    int32_t eot() const;
    int32_t unk() const;
    int32_t pad() const;
    bool add_bos() const;
    bool add_eos() const;
    bool add_space_prefix() const;
    bool is_eog(int32_t id) const;  // ends generation: eos, eot, eom, <|im_end|>...
    const std::vector<int32_t>& eog_ids() const;
    bool is_control(int32_t id) const;

private:
    struct Impl;
    explicit Tokenizer(std::shared_ptr<const Impl> impl);
    void check_id(int32_t id) const;
    std::shared_ptr<const Impl> impl_;
};

}  // namespace syslm::tokenizer
