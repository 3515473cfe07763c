// Training a byte-level BPE vocabulary (GPT-2 style) from text, written as a tokenizer-only GGUF
// that Tokenizer::from_gguf (and llama.cpp) read back.
//
// Method, as GPT-2 / HF tokenizers' BpeTrainer:
// 1. Special tokens are cut out of the text (they are never part of a word), the rest is split
//    into words with the regexes of the pre-tokenizer family (`tokenizer.ggml.pre`, "gpt-2" by
//    default), and each distinct word is counted.
// 2. Every word starts as its bytes; the base vocabulary is the 256 one-byte tokens (id = byte
//    value, text = the byte's character in GPT-2's byte-level alphabet).
// 3. The most frequent adjacent pair of symbols (counted over words times their frequency) is
//    merged into a new token, repeatedly, until the vocabulary has the size asked for or no pair
//    is seen at least `min_frequency` times. Inside a word a merge applies left to right without
//    overlap ("a a a" with the pair (a, a) becomes "aa a").
//    Ties: among pairs with the same count, the one whose left token text is smallest wins, then
//    the smallest right token text (byte-wise comparison of the byte-level texts, i.e. code point
//    order). HF tokenizers breaks ties on token ids instead, so the two merge lists may differ
//    where counts tie; the tokenizations they give are of the same quality.
// 4. Pair counts live in a hash map, with an index pair -> words that contain it; a merge
//    revisits only those words and updates the counts of the pairs that changed. The best pair is
//    found with a max-heap whose stale entries (count no longer current) are skipped when popped.
//
// Token ids: 0..255 the bytes, then one per merge in merge order, then the special tokens
// (CONTROL) in the order given. The first special token is the BOS and EOS token, as GPT-2's
// <|endoftext|>.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/vocab.hpp"

namespace syslm::tokenizer {

struct BpeTrainerOptions {
    size_t vocab_size = 8192;    // total: 256 byte tokens + merges + special tokens
    uint64_t min_frequency = 2;  // a pair seen fewer times than this is never merged
    std::vector<std::string> special_tokens = {"<|endoftext|>"};  // CONTROL tokens, at the end
    std::string pre = "gpt-2";  // pre-tokenizer family (a tokenizer.ggml.pre value)
};

struct BpeTrainStats {
    uint64_t text_bytes = 0;  // bytes given to add_text (special tokens included)
    uint64_t words = 0;       // pre-tokenized words counted
    uint64_t distinct_words = 0;
    uint64_t special_occurrences = 0;  // special tokens cut out of the text
    size_t merges = 0;
    // Tokens the training text became with the learned merges (words as merged by training,
    // plus one per special token occurrence); text_bytes / tokens is the compression.
    uint64_t tokens = 0;
    bool stopped_early = false;  // no pair left with min_frequency before vocab_size was reached
};

class BpeTrainer {
public:
    // Validates the options: throws Error when vocab_size < 256 + special tokens, a special
    // token is empty or repeated, or the pre-tokenizer family is unknown.
    explicit BpeTrainer(BpeTrainerOptions options);

    // Counts the words of one document (e.g. one file); pieces of different calls never join.
    void add_text(std::string_view text);

    // Learns the merges and returns the vocabulary (type BPE, tokens, token types, merges,
    // bos/eos, add_bos/add_eos = false). Throws Error if no text was added or it had no words.
    // May be called once.
    VocabSpec train();

    const BpeTrainStats& stats() const { return stats_; }
    const BpeTrainerOptions& options() const { return options_; }

private:
    void count_words(std::string_view text);

    BpeTrainerOptions options_;
    PreTokenizer pre_tokenizer_;
    std::unordered_map<std::string, uint64_t, StringHash, std::equal_to<>> word_counts_;
    std::vector<std::string_view> pieces_;  // scratch for the pre-tokenizer
    BpeTrainStats stats_;
    bool trained_ = false;
};

// Writes `spec` as a GGUF file holding only tokenizer metadata (atomically): the tokenizer.ggml.*
// keys plus general.name. There is no general.architecture: the file holds no model to run, and
// model/random_init copies only the tokenizer.* keys into the model it creates.
void write_tokenizer_gguf(const VocabSpec& spec, const std::string& path);

}  // namespace syslm::tokenizer
