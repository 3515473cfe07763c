// syslm::data — token shards: the files `syslm data prepare` writes and training mmaps.
//
// Shard file format, version 1 (all integers little-endian):
//
//   offset  size  field
//        0     4  magic "SYTK"
//        4     4  u32 version = 1
//        8     4  u32 dtype: 1 = u16 tokens, 2 = u32 tokens (u16 whenever the vocabulary fits)
//       12     4  u32 flags, must be 0 (reserved: a reader refuses what it cannot interpret)
//       16     8  u64 token count
//       24     8  u64 checksum (below)
//       32        count tokens of the dtype's width; the file ends exactly after them
//
// The checksum covers header bytes 0..23 and then the token bytes: h = 0xcbf29ce484222325, then
// for each 8-byte little-endian word w of that byte string, h = (h ^ w) * 0x100000001b3, and for
// the 0..7 bytes left over at the end, the same one byte at a time (FNV-1a on 64-bit words,
// core/checksum.hpp). Readers verify it at open by default, in the same pass that finds the
// largest token.
//
// A shard is written atomically (temporary file + rename), so a reader sees a whole shard or
// none. Every reader error names the file and says what is wrong; no input crashes the reader.
#pragma once

#include <bit>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace syslm {
class MappedFile;
}

namespace syslm::data {

static_assert(std::endian::native == std::endian::little, "shards are read in place: LE only");

inline constexpr char kShardMagic[4] = {'S', 'Y', 'T', 'K'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 32;

enum class TokenDType : uint32_t { U16 = 1, U32 = 2 };

inline size_t dtype_width(TokenDType t) {
    return t == TokenDType::U16 ? 2 : 4;
}
const char* dtype_name(TokenDType t);  // "u16" / "u32"

// The narrowest dtype that holds every id of a vocabulary of n_vocab tokens.
TokenDType dtype_for_vocab(uint64_t n_vocab);

// The checksum of the format above, for `header` (bytes 0..23) followed by `tokens` bytes.
uint64_t shard_checksum(std::span<const uint8_t> header24, std::span<const uint8_t> tokens);

// Writes a whole shard atomically. Throws Error naming `path` when a token does not fit `dtype`
// (or is negative) or the write fails; the previous file at `path`, if any, is then untouched.
void write_shard(const std::string& path, std::span<const uint32_t> tokens, TokenDType dtype);

struct ShardOpenOptions {
    // Read every token once at open: verify the checksum and find the largest id. Off, opening is
    // O(1) and only the header and file size are checked (tokens are then range-checked as read).
    bool verify = true;
};

// A read-only shard mapped into memory. Movable, not copyable.
class Shard {
public:
    explicit Shard(const std::string& path, ShardOpenOptions opt = {});
    ~Shard();
    Shard(Shard&&) noexcept;
    Shard& operator=(Shard&&) noexcept;

    const std::string& path() const { return path_; }
    TokenDType dtype() const { return dtype_; }
    uint64_t size() const { return count_; }  // number of tokens
    uint64_t checksum() const { return checksum_; }
    bool verified() const { return verified_; }
    // The largest token id (only when verified(); else throws).
    uint32_t max_token() const;

    uint32_t operator[](uint64_t i) const {
        return dtype_ == TokenDType::U16 ? reinterpret_cast<const uint16_t*>(tokens_)[i]
                                         : reinterpret_cast<const uint32_t*>(tokens_)[i];
    }
    // Copies tokens [start, start + n) widened to int32; throws when the range is outside the
    // shard or a token is >= n_vocab (n_vocab 0: no check). The error names the file and index.
    void read(uint64_t start, uint64_t n, int32_t* out, uint64_t n_vocab = 0) const;
    // The index of the first token >= n_vocab, or size() if none (for error messages).
    uint64_t find_token_at_least(uint64_t n_vocab) const;

private:
    std::string path_;
    std::unique_ptr<MappedFile> file_;
    const uint8_t* tokens_ = nullptr;
    TokenDType dtype_ = TokenDType::U16;
    uint64_t count_ = 0;
    uint64_t checksum_ = 0;
    uint32_t max_token_ = 0;
    bool verified_ = false;
};

// ---- data directory: `<dir>/train_000.bin ...`, `<dir>/val_000.bin ...`, `<dir>/meta.json` ----

struct DataMeta {
    uint32_t format_version = kShardVersion;
    std::string tokenizer;        // the tokenizer GGUF it was prepared with (as given)
    uint32_t n_vocab = 0;         // that tokenizer's vocabulary size
    uint64_t tokenizer_hash = 0;  // tokenizer_fingerprint() of it
    int32_t separator = -1;       // the token put before every document
    TokenDType dtype = TokenDType::U16;
    double val_fraction = 0;
    uint64_t chunk_tokens = 0;  // train/val split granularity (see data/prepare.hpp)
    uint64_t train_tokens = 0, val_tokens = 0;
    std::vector<std::string> train_shards, val_shards;  // file names inside the directory
};

std::string meta_path(const std::string& dir);                  // <dir>/meta.json
void write_meta(const std::string& dir, const DataMeta& meta);  // atomic
// Throws Error naming the file for a missing file, bad JSON, a missing or mistyped field.
DataMeta read_meta(const std::string& dir);

// Paths of the shards of `split` ("train" or "val") in `dir`, as listed in its meta.json (written
// last by `data prepare`, removed first, so a failed run leaves no half-written set behind).
// Throws when meta.json is missing or bad or lists no such shard.
std::vector<std::string> split_shard_paths(const std::string& dir, const std::string& split);

}  // namespace syslm::data
