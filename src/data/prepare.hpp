// `syslm data prepare`: text files -> token shards + meta.json (formats in data/shards.hpp).
//
// Documents. Each input is cut into documents (--docs): `line` = every non-empty line (its
// newline dropped), `blank` = runs of lines separated by blank (empty or whitespace-only) lines,
// joined by their newlines, `file` = each file whole. Every document is encoded on its own
// (no BOS/EOS added by the tokenizer, special-token text kept as plain text) and preceded by one
// separator token: BOS when the vocabulary adds BOS to prompts (SentencePiece llama: the model
// then sees documents start as prompts will), otherwise EOS (GPT-2's <|endoftext|>).
//
// Train/val split. The resulting token stream (separators included) is cut into chunks of
// chunk_tokens tokens; chunk c goes to val iff floor((c + 1)·f) > floor(c·f) for val fraction f
// (rounded to millionths, computed in integers). That sends a fraction f of the chunks to val,
// evenly spaced (every 50th for f = 0.02, the first being chunk 49), so val samples the whole
// corpus rather than only its end, and is the same on every run. Chunks ignore document
// boundaries. Each split's stream is written as shards of at most shard_tokens tokens
// (<out>/train_000.bin ..., <out>/val_000.bin ...), then <out>/meta.json (an earlier meta.json
// is removed first, so a failed run leaves a directory no loader accepts). Shards of an earlier
// run in <out> that this run did not write (a higher train_NNN, say) are removed, so the
// directory always holds exactly one prepared data set.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/shards.hpp"

namespace syslm::tokenizer {
class Tokenizer;
}

namespace syslm::data {

enum class DocMode { Line, Blank, File };

// One prepared data set's directory and split.
struct DatasetOptions {
    std::string tokenizer_path;  // recorded in meta.json
    std::string out_dir;
    double val_fraction = 0.02;  // 0 = no val split; at most 0.5
    uint64_t shard_tokens = uint64_t(1) << 25;
    uint64_t chunk_tokens = 2048;
};

struct PrepareOptions : DatasetOptions {
    std::vector<std::string> inputs;  // text files
    DocMode docs = DocMode::Blank;
};

struct PrepareStats {
    DataMeta meta;
    uint64_t n_docs = 0, n_bytes = 0;
    double seconds = 0;           // wall time of the whole run
    double tokenize_seconds = 0;  // of which in the tokenizer
    // Bad input, skipped: binary files (a NUL byte in the first 8 KiB) and documents that are
    // not valid UTF-8.
    std::vector<std::string> skipped_binary;
    int64_t skipped_invalid_utf8 = 0;
};

// A NUL byte in the stream's first 8 KiB: a binary file (as grep and git decide), not text to
// tokenize. Reads from the start and rewinds.
bool is_binary_file(std::istream& in);

// Hash of a tokenizer's vocabulary (type, and every token's text and type, in id order): two
// tokenizers with the same fingerprint produce the same ids.
uint64_t tokenizer_fingerprint(const tokenizer::Tokenizer& tok);

// The separator token put before every document (see above); throws when the vocabulary has none.
int32_t document_separator(const tokenizer::Tokenizer& tok);

// Writes one data set document by document (what prepare_data and `data mix` share): meta.json
// of an earlier set is removed at construction, the new one written by finish().
class DatasetWriter {
public:
    DatasetWriter(const DatasetOptions& opt, const tokenizer::Tokenizer& tok);
    ~DatasetWriter();
    // Encodes a document and appends it after the separator; returns its tokens, separator
    // included.
    uint64_t add_document(std::string_view text);
    // Appends tokens as they are (documents already with their separators): cut into chunks
    // for the train/val split as documents are, or all to one split.
    enum class Split { ByChunk, Train, Val };
    void add_tokens(std::span<const uint32_t> tokens, Split split = Split::ByChunk);
    // Flushes the splits, checks that none is empty (val only when asked for), writes meta.json
    // and removes shards of an earlier set. Throws Error naming the directory.
    const DataMeta& finish();
    const DataMeta& meta() const { return meta_; }  // before finish(): tokenizer fields only
    uint64_t n_docs() const { return n_docs_; }
    double tokenize_seconds() const { return tokenize_seconds_; }

private:
    struct Impl;
    DatasetOptions opt_;
    const tokenizer::Tokenizer& tok_;
    DataMeta meta_;
    std::unique_ptr<Impl> impl_;
    uint64_t n_docs_ = 0;
    double tokenize_seconds_ = 0;
};

// Throws Error naming the input / output file on unreadable input, an empty corpus, an empty val
// split when one was asked for, or a failed write. `on_file(path, bytes, tokens)` is called after
// each input file.
PrepareStats prepare_data(
    const PrepareOptions& opt, const tokenizer::Tokenizer& tok,
    const std::function<void(const std::string&, uint64_t, uint64_t)>& on_file = {});

// Throws when data prepared with `meta`'s tokenizer cannot feed a model of n_vocab tokens
// (a larger tokenizer vocabulary than the model's), naming the meta file.
void check_model_vocab(const std::string& data_dir, const DataMeta& meta, uint64_t n_vocab);

}  // namespace syslm::data
