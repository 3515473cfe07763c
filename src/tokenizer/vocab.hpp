// A tokenizer vocabulary as stored in GGUF (`tokenizer.ggml.*`), and the tables built from it.
//
// VocabSpec is the plain content of the keys (what a converter writes); Vocab is the validated,
// indexed form the encoders use: token text -> id map, special-token list, byte-fallback table,
// end-of-generation set and the flags with llama.cpp's defaults applied.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace syslm::tokenizer {

enum class VocabType {
    SPM,  // tokenizer.ggml.model = "llama": SentencePiece-style, score-driven merges
    BPE,  // tokenizer.ggml.model = "gpt2": byte-level BPE with ranked merges
};

// tokenizer.ggml.token_type values (llama.cpp's LLAMA_TOKEN_TYPE_*).
enum class TokenType : int32_t {
    UNDEFINED = 0,
    NORMAL = 1,
    UNKNOWN = 2,
    CONTROL = 3,
    USER_DEFINED = 4,
    UNUSED = 5,
    BYTE = 6,
};

// The raw tokenizer metadata. Optional fields are absent keys; defaults are applied by Vocab.
struct VocabSpec {
    VocabType type = VocabType::SPM;
    std::string pre;                   // BPE pre-tokenizer family; empty = "default"
    std::vector<std::string> tokens;   // id -> text (SPM: U+2581 for spaces; BPE: byte-level)
    std::vector<float> scores;         // SPM merge priorities; empty = all 0
    std::vector<int32_t> token_types;  // TokenType values; empty = all NORMAL
    std::vector<std::string> merges;   // BPE: "left right", by rank
    std::optional<uint32_t> bos, eos, eot, eom, unk, sep, pad, mask;
    std::optional<uint32_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    std::optional<bool> add_bos, add_eos, add_space_prefix;
    std::string model_name;          // general.name: llama.cpp sets per-token strip flags for Phi-3
    std::string source = "<vocab>";  // file name for error messages
};

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct Vocab {
    VocabType type = VocabType::SPM;
    std::string pre;  // resolved family name (BPE)
    std::string source;

    std::vector<std::string> text;  // id -> token text
    std::vector<float> score;
    std::vector<TokenType> token_type;
    std::vector<uint8_t> lstrip, rstrip;  // strip whitespace beside a special token when splitting
    TokenMap ids;

    int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
    int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
    bool add_bos = false, add_eos = false, add_space_prefix = false;
    bool ignore_merges = false;
    // SPM: character pairs found inside tokens (spm_adjacent_pairs); spm_tokenize cuts text
    // between characters that form no such pair. spm_cut_text = false merges over whole texts.
    std::vector<uint64_t> spm_pairs;
    bool spm_cut_text = true;

    std::vector<int32_t> eog;             // end-of-generation ids, sorted
    std::vector<int32_t> special_tokens;  // CONTROL / USER_DEFINED / UNKNOWN, longest text first
    std::array<std::vector<int32_t>, 256> special_by_first_byte;  // the same, by first byte
    std::array<int32_t, 256> byte_token;  // SPM byte fallback (<0xXX>), -1 if missing

    // Validates `spec` (sizes, ids in range, duplicate texts) and builds the tables; throws Error
    // naming spec.source and what is wrong.
    explicit Vocab(VocabSpec spec);

    int32_t n_tokens() const { return static_cast<int32_t>(text.size()); }
    int32_t find(std::string_view s) const {
        auto it = ids.find(s);
        return it == ids.end() ? -1 : it->second;
    }
    bool is_special(int32_t id) const {  // rendered as plain text, never split or merged
        const TokenType t = token_type[id];
        return t == TokenType::CONTROL || t == TokenType::USER_DEFINED || t == TokenType::UNKNOWN;
    }

private:
    // The constructor's steps, in order.
    void set_type_defaults(const VocabSpec& spec);
    void take_tokens(VocabSpec& spec);
    void set_special_ids(const VocabSpec& spec);
    void detect_special_ids();
    void index_special_tokens();
    void set_strip_flags(const VocabSpec& spec);
    void index_byte_tokens();
};

// A SentencePiece-style vocabulary of n_tokens (at least 3) that needs no text to build: <unk>,
// <s>, </s>, the 256 byte tokens <0x00>..<0xFF> (as many as fit), then unused placeholders. Every
// text encodes (byte fallback) and decodes back when all 256 bytes fit (n_tokens >= 259). For
// models trained on random or pre-tokenized ids: `train --synthetic-data --vocab N`, `init
// --vocab-size N`.
VocabSpec byte_fallback_vocab(int n_tokens);

}  // namespace syslm::tokenizer
