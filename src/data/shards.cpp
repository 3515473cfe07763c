#include "data/shards.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"

namespace syslm::data {
namespace {

uint64_t load_u64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

template <class T>
uint32_t max_of(const uint8_t* p, uint64_t n) {
    const T* t = reinterpret_cast<const T*>(p);
    T m = 0;
    for (uint64_t i = 0; i < n; ++i) m = std::max(m, t[i]);
    return m;
}

}  // namespace

const char* dtype_name(TokenDType t) {
    return t == TokenDType::U16 ? "u16" : "u32";
}

TokenDType dtype_for_vocab(uint64_t n_vocab) {
    return n_vocab <= 65536 ? TokenDType::U16 : TokenDType::U32;
}

uint64_t shard_checksum(std::span<const uint8_t> header24, std::span<const uint8_t> tokens) {
    SYSLM_CHECK(header24.size() == 24, "shard_checksum: the header part is 24 bytes");
    WordHash h;  // the header part is three whole words, so the word grid is the file's
    h.update(header24);
    h.update(tokens);
    return h.value();
}

void write_shard(const std::string& path, std::span<const uint32_t> tokens, TokenDType dtype) {
    SYSLM_CHECK(dtype == TokenDType::U16 || dtype == TokenDType::U32, path,
                ": unknown token dtype ", static_cast<uint32_t>(dtype));
    const size_t width = dtype_width(dtype);
    std::vector<uint8_t> body(tokens.size() * width);
    if (dtype == TokenDType::U16) {
        for (size_t i = 0; i < tokens.size(); ++i) {
            SYSLM_CHECK(tokens[i] <= 0xFFFF, path, ": token ", i, " is ", tokens[i],
                        ", which does not fit a u16 shard");
            const uint16_t v = static_cast<uint16_t>(tokens[i]);
            std::memcpy(body.data() + 2 * i, &v, 2);
        }
    } else {
        for (size_t i = 0; i < tokens.size(); ++i)
            SYSLM_CHECK(tokens[i] <= uint32_t(std::numeric_limits<int32_t>::max()), path,
                        ": token ", i, " is ", tokens[i], ", which is not a valid token id");
        if (!tokens.empty()) std::memcpy(body.data(), tokens.data(), body.size());
    }

    uint8_t header[kShardHeaderBytes] = {};
    std::memcpy(header, kShardMagic, 4);
    const uint32_t version = kShardVersion, dt = static_cast<uint32_t>(dtype), flags = 0;
    const uint64_t count = tokens.size();
    std::memcpy(header + 4, &version, 4);
    std::memcpy(header + 8, &dt, 4);
    std::memcpy(header + 12, &flags, 4);
    std::memcpy(header + 16, &count, 8);
    const uint64_t sum = shard_checksum({header, 24}, body);
    std::memcpy(header + 24, &sum, 8);

    AtomicFileWriter w(path);
    w.write(header, sizeof header);
    w.write(body.data(), body.size());
    w.commit();
}

Shard::Shard(const std::string& path, ShardOpenOptions opt)
    : path_(path), file_(std::make_unique<MappedFile>(path)) {
    const uint8_t* p = file_->data();
    const size_t size = file_->size();
    SYSLM_CHECK(size >= kShardHeaderBytes, path, ": not a token shard: the file has ", size,
                " bytes, fewer than the ", kShardHeaderBytes, "-byte shard header");
    if (std::memcmp(p, kShardMagic, 4) != 0) {
        std::string got;
        for (int i = 0; i < 4; ++i) {
            const char c = static_cast<char>(p[i]);
            got += (c >= 0x20 && c < 0x7F) ? std::string(1, c) : cat("\\x", std::hex, int(p[i]));
        }
        fail(path, ": not a token shard: magic is '", got, "', expected 'SYTK'");
    }
    const uint32_t version = load_u32(p + 4);
    SYSLM_CHECK(version == kShardVersion, path, ": shard version ", version,
                " (byte 4) is not supported; this build reads version ", kShardVersion);
    const uint32_t dt = load_u32(p + 8);
    SYSLM_CHECK(dt == 1 || dt == 2, path, ": unknown token dtype ", dt,
                " (byte 8); expected 1 (u16) or 2 (u32)");
    dtype_ = static_cast<TokenDType>(dt);
    const uint32_t flags = load_u32(p + 12);
    SYSLM_CHECK(flags == 0, path, ": flags 0x", std::hex, flags, std::dec,
                " (byte 12) are not understood by this reader (must be 0)");
    count_ = load_u64(p + 16);
    const size_t width = dtype_width(dtype_);
    const uint64_t body = size - kShardHeaderBytes;
    // Compared by division so that a huge corrupt count cannot overflow.
    SYSLM_CHECK(count_ <= body / width && count_ * width == body, path,
                ": the header (byte 16) says ", count_, " ", dtype_name(dtype_),
                " tokens, but the file has ", body, " bytes after the header (", body / width,
                body % width ? " tokens and a part" : " tokens", "): truncated or corrupt");
    tokens_ = p + kShardHeaderBytes;
    checksum_ = load_u64(p + 24);
    if (opt.verify) {
        const uint64_t got = shard_checksum({p, 24}, {tokens_, body});
        SYSLM_CHECK(got == checksum_, path, ": checksum mismatch: the header (byte 24) says 0x",
                    std::hex, checksum_, ", the content hashes to 0x", got, std::dec,
                    ": the file is corrupt");
        max_token_ = dtype_ == TokenDType::U16 ? max_of<uint16_t>(tokens_, count_)
                                               : max_of<uint32_t>(tokens_, count_);
        verified_ = true;
    }
}

Shard::~Shard() = default;
Shard::Shard(Shard&&) noexcept = default;
Shard& Shard::operator=(Shard&&) noexcept = default;

uint32_t Shard::max_token() const {
    SYSLM_CHECK(verified_, path_, ": max_token() needs a shard opened with verify");
    return max_token_;
}

uint64_t Shard::find_token_at_least(uint64_t n_vocab) const {
    for (uint64_t i = 0; i < count_; ++i)
        if ((*this)[i] >= n_vocab) return i;
    return count_;
}

void Shard::read(uint64_t start, uint64_t n, int32_t* out, uint64_t n_vocab) const {
    SYSLM_CHECK(start <= count_ && n <= count_ - start, path_, ": tokens [", start, ", ", start + n,
                ") are outside the shard's ", count_, " tokens");
    uint32_t bad = 0;
    for (uint64_t i = 0; i < n; ++i) {
        const uint32_t t = (*this)[start + i];
        out[i] = static_cast<int32_t>(t);
        bad |= (n_vocab != 0 && t >= n_vocab) | (t > uint32_t(std::numeric_limits<int32_t>::max()));
    }
    if (bad) {
        for (uint64_t i = 0; i < n; ++i) {
            const uint32_t t = (*this)[start + i];
            SYSLM_CHECK(
                (n_vocab == 0 || t < n_vocab) && t <= uint32_t(std::numeric_limits<int32_t>::max()),
                path_, ": token ", start + i, " is ", t, ", outside the vocabulary of ", n_vocab,
                " tokens (were the shards prepared with another tokenizer?)");
        }
    }
}

// ---- data directory ----

std::string meta_path(const std::string& dir) {
    return (std::filesystem::path(dir) / "meta.json").string();
}

void write_meta(const std::string& dir, const DataMeta& m) {
    nlohmann::ordered_json j;
    j["format"] = "syslm-token-shards";
    j["format_version"] = m.format_version;
    j["tokenizer"] = m.tokenizer;
    j["n_vocab"] = m.n_vocab;
    j["tokenizer_hash"] = cat(std::hex, m.tokenizer_hash);
    j["separator"] = m.separator;
    j["dtype"] = dtype_name(m.dtype);
    j["val_fraction"] = m.val_fraction;
    j["chunk_tokens"] = m.chunk_tokens;
    j["train_tokens"] = m.train_tokens;
    j["val_tokens"] = m.val_tokens;
    j["train_shards"] = m.train_shards;
    j["val_shards"] = m.val_shards;
    write_file_atomically(meta_path(dir), j.dump(2) + "\n");
}

DataMeta read_meta(const std::string& dir) {
    const std::string path = meta_path(dir);
    std::ifstream in(path);
    SYSLM_CHECK(in, path, ": cannot open (is this a directory written by `syslm data prepare`?)");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail(path, ": not valid JSON: ", e.what());
    }
    SYSLM_CHECK(j.is_object(), path, ": expected a JSON object");
    SYSLM_CHECK(j.value("format", "") == "syslm-token-shards", path,
                ": \"format\" is not \"syslm-token-shards\"");
    DataMeta m;
    auto field = [&](const char* key) -> const nlohmann::json& {
        SYSLM_CHECK(j.contains(key), path, ": missing field \"", key, "\"");
        return j.at(key);
    };
    try {
        m.format_version = field("format_version").get<uint32_t>();
        m.tokenizer = field("tokenizer").get<std::string>();
        m.n_vocab = field("n_vocab").get<uint32_t>();
        m.tokenizer_hash = std::stoull(field("tokenizer_hash").get<std::string>(), nullptr, 16);
        m.separator = field("separator").get<int32_t>();
        const std::string dt = field("dtype").get<std::string>();
        SYSLM_CHECK(dt == "u16" || dt == "u32", path, ": \"dtype\" is \"", dt,
                    "\", expected \"u16\" or \"u32\"");
        m.dtype = dt == "u16" ? TokenDType::U16 : TokenDType::U32;
        m.val_fraction = field("val_fraction").get<double>();
        m.chunk_tokens = field("chunk_tokens").get<uint64_t>();
        m.train_tokens = field("train_tokens").get<uint64_t>();
        m.val_tokens = field("val_tokens").get<uint64_t>();
        m.train_shards = field("train_shards").get<std::vector<std::string>>();
        m.val_shards = field("val_shards").get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception& e) {
        fail(path, ": a field has the wrong type: ", e.what());
    } catch (const std::logic_error&) {  // stoull
        fail(path, ": \"tokenizer_hash\" is not a hexadecimal number");
    }
    SYSLM_CHECK(m.format_version == kShardVersion, path, ": format_version ", m.format_version,
                " is not supported (this build reads ", kShardVersion, ")");
    for (const auto* list : {&m.train_shards, &m.val_shards})
        for (const auto& name : *list)
            SYSLM_CHECK(!name.empty() && name.find('/') == std::string::npos, path,
                        ": shard name \"", name, "\" must be a plain file name");
    return m;
}

std::vector<std::string> split_shard_paths(const std::string& dir, const std::string& split) {
    SYSLM_CHECK(split == "train" || split == "val", "unknown data split \"", split,
                "\" (train or val)");
    const DataMeta m = read_meta(dir);
    std::vector<std::string> paths;
    for (const auto& name : split == "train" ? m.train_shards : m.val_shards)
        paths.push_back((std::filesystem::path(dir) / name).string());
    SYSLM_CHECK(!paths.empty(), meta_path(dir), ": lists no ", split, " shards",
                split == "val" ? " (prepared with --val 0)" : "");
    return paths;
}

}  // namespace syslm::data
