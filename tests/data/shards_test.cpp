// Token shards: round trips in both widths, and every way a shard file can be broken (each byte
// truncated away, each bit of each byte flipped, random garbage) gives an Error naming the file,
// never a crash or a silently wrong shard. Also meta.json.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.hpp"
#include "data/shards.hpp"
#include "test_util.hpp"

namespace syslm::data {
namespace {

using test::fresh_dir;
using test::read_bytes;
using test::write_bytes;

std::vector<uint32_t> random_tokens(size_t n, uint32_t max, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint32_t> t(n);
    for (auto& v : t) v = rng() % (max + 1);
    return t;
}

// Opening `path` throws an Error whose message names the file and contains `what`.
void expect_error(const std::string& path, const std::string& what, ShardOpenOptions opt = {}) {
    try {
        Shard s(path, opt);
        ADD_FAILURE() << path << ": opened without an error (" << s.size() << " tokens)";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
    }
}

TEST(Shards, RoundTripBothWidths) {
    const std::string dir = fresh_dir();
    for (TokenDType dt : {TokenDType::U16, TokenDType::U32}) {
        for (size_t n : {size_t(0), size_t(1), size_t(3), size_t(4), size_t(1001)}) {
            SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
            const uint32_t max = dt == TokenDType::U16 ? 0xFFFF : 0x7FFFFFFF;
            auto tokens = random_tokens(n, max, uint32_t(n));
            if (n > 1) tokens[n / 2] = max;  // the extremes survive
            const std::string path = dir + "/s_" + dtype_name(dt) + std::to_string(n) + ".bin";
            write_shard(path, tokens, dt);
            EXPECT_EQ(std::filesystem::file_size(path), kShardHeaderBytes + n * dtype_width(dt));

            const Shard s(path);
            EXPECT_EQ(s.dtype(), dt);
            ASSERT_EQ(s.size(), n);
            EXPECT_TRUE(s.verified());
            uint32_t mx = 0;
            for (size_t i = 0; i < n; ++i) {
                ASSERT_EQ(s[i], tokens[i]) << i;
                mx = std::max(mx, tokens[i]);
            }
            EXPECT_EQ(s.max_token(), mx);
            std::vector<int32_t> out(n);
            s.read(0, n, out.data());
            for (size_t i = 0; i < n; ++i) ASSERT_EQ(uint32_t(out[i]), tokens[i]);
            // Unverified open reads the same tokens.
            const Shard fast(path, {.verify = false});
            EXPECT_FALSE(fast.verified());
            EXPECT_THROW(fast.max_token(), Error);
            for (size_t i = 0; i < n; ++i) ASSERT_EQ(fast[i], tokens[i]);
        }
    }
}

TEST(Shards, HeaderLayoutIsTheDocumentedOne) {
    const std::string path = fresh_dir() + "/h.bin";
    write_shard(path, std::vector<uint32_t>{1, 2, 0xBEEF}, TokenDType::U16);
    const auto b = read_bytes(path);
    ASSERT_EQ(b.size(), 32u + 6u);
    EXPECT_EQ(std::memcmp(b.data(), "SYTK", 4), 0);
    auto u32 = [&](size_t o) {
        return uint32_t(b[o]) | b[o + 1] << 8 | b[o + 2] << 16 | uint32_t(b[o + 3]) << 24;
    };
    EXPECT_EQ(u32(4), 1u);   // version
    EXPECT_EQ(u32(8), 1u);   // u16
    EXPECT_EQ(u32(12), 0u);  // flags
    EXPECT_EQ(u32(16), 3u);  // count, low half
    EXPECT_EQ(u32(20), 0u);
    uint64_t sum;
    std::memcpy(&sum, b.data() + 24, 8);
    EXPECT_EQ(sum, shard_checksum({b.data(), 24}, {b.data() + 32, 6}));
    EXPECT_EQ(b[36], 0xEF);  // little-endian tokens
    EXPECT_EQ(b[37], 0xBE);
}

TEST(Shards, WriterRejectsTokensThatDoNotFit) {
    const std::string path = fresh_dir() + "/w.bin";
    write_shard(path, std::vector<uint32_t>{7}, TokenDType::U16);
    const auto before = read_bytes(path);
    try {
        write_shard(path, std::vector<uint32_t>{1, 65536}, TokenDType::U16);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("token 1 is 65536"), std::string::npos) << e.what();
    }
    EXPECT_THROW(write_shard(path, std::vector<uint32_t>{0x80000000u}, TokenDType::U32), Error);
    EXPECT_EQ(read_bytes(path), before);  // the old shard is untouched, no temp file left
    size_t files = 0;
    for ([[maybe_unused]] const auto& e :
         std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
        ++files;
    EXPECT_EQ(files, 1u);
}

TEST(Shards, DtypeForVocab) {
    EXPECT_EQ(dtype_for_vocab(50257), TokenDType::U16);
    EXPECT_EQ(dtype_for_vocab(65536), TokenDType::U16);
    EXPECT_EQ(dtype_for_vocab(65537), TokenDType::U32);
    EXPECT_EQ(dtype_for_vocab(151936), TokenDType::U32);
}

TEST(Shards, NamedErrors) {
    const std::string dir = fresh_dir();
    const std::string good = dir + "/good.bin";
    write_shard(good, random_tokens(10, 1000, 1), TokenDType::U16);
    const auto b = read_bytes(good);
    auto variant = [&](const std::string& name, auto edit) {
        auto c = b;
        edit(c);
        const std::string p = dir + "/" + name;
        write_bytes(p, c);
        return p;
    };
    expect_error(variant("empty.bin", [](auto& c) { c.clear(); }), "fewer than the 32-byte");
    expect_error(variant("magic.bin", [](auto& c) { c[0] = 'G'; }), "magic is 'GYTK'");
    expect_error(variant("version.bin", [](auto& c) { c[4] = 2; }), "shard version 2");
    expect_error(variant("dtype.bin", [](auto& c) { c[8] = 3; }), "unknown token dtype 3");
    expect_error(variant("flags.bin", [](auto& c) { c[12] = 1; }), "flags 0x1");
    expect_error(variant("count.bin", [](auto& c) { c[16] = 11; }), "says 11 u16 tokens");
    expect_error(variant("huge.bin", [](auto& c) { c[23] = 0xFF; }), "truncated or corrupt");
    expect_error(variant("trailing.bin", [](auto& c) { c.push_back(0); }), "truncated or corrupt");
    expect_error(variant("token.bin", [](auto& c) { c[40] ^= 4; }), "checksum mismatch");
    expect_error(variant("sum.bin", [](auto& c) { c[30] ^= 4; }), "checksum mismatch");
    expect_error(dir + "/missing.bin", "cannot open");
    expect_error(dir, "not a regular file");
    // u16 tokens relabelled as u32 are caught by the size (an odd count) or the checksum.
    expect_error(variant("width.bin", [](auto& c) { c[8] = 2; }), "truncated or corrupt");
}

TEST(Shards, EveryTruncationIsAnError) {
    const std::string dir = fresh_dir();
    for (TokenDType dt : {TokenDType::U16, TokenDType::U32}) {
        const std::string good = dir + "/good.bin";
        write_shard(good, random_tokens(25, 60000, 2), dt);
        const auto b = read_bytes(good);
        const std::string p = dir + "/cut.bin";
        for (size_t len = 0; len < b.size(); ++len) {
            SCOPED_TRACE(len);
            write_bytes(p, std::vector<uint8_t>(b.begin(), b.begin() + len));
            EXPECT_THROW(Shard(p, {.verify = false}), Error);
            EXPECT_THROW(Shard{p}, Error);
        }
    }
}

TEST(Shards, EveryFlippedBitIsAnError) {
    const std::string dir = fresh_dir();
    const std::string good = dir + "/good.bin";
    write_shard(good, random_tokens(21, 60000, 3), TokenDType::U16);
    const auto b = read_bytes(good);
    const std::string p = dir + "/flip.bin";
    for (size_t at = 0; at < b.size(); ++at) {
        for (int bit = 0; bit < 8; ++bit) {
            auto c = b;
            c[at] ^= uint8_t(1u << bit);
            write_bytes(p, c);
            SCOPED_TRACE(testing::Message() << "byte " << at << " bit " << bit);
            EXPECT_THROW(Shard{p}, Error);
            // Without verification the header fields other than the checksum are still checked.
            if (at < 24) {
                EXPECT_THROW(Shard(p, {.verify = false}), Error);
            }
        }
    }
}

TEST(Shards, RandomGarbageNeverCrashes) {
    const std::string p = fresh_dir() + "/garbage.bin";
    std::mt19937 rng(4);
    for (int iter = 0; iter < 2000; ++iter) {
        std::vector<uint8_t> c(rng() % 80);
        for (auto& x : c) x = uint8_t(rng());
        // Half of them start like a shard, so the later checks are reached too.
        if (iter % 2 && c.size() >= 16) {
            std::memcpy(c.data(), "SYTK\x01\0\0\0", 8);
            c[8] = uint8_t(1 + rng() % 2);
            std::memset(c.data() + 9, 0, 7);
        }
        write_bytes(p, c);
        for (bool verify : {false, true}) {
            try {
                Shard s(p, {.verify = verify});
                // Only a consistent file may open: then every token is readable.
                EXPECT_EQ(c.size(), kShardHeaderBytes + s.size() * dtype_width(s.dtype()));
                for (uint64_t i = 0; i < s.size(); ++i) (void)s[i];
            } catch (const Error&) {
            }
        }
    }
}

TEST(Shards, ReadChecksRangeAndVocabulary) {
    const std::string path = fresh_dir() + "/r.bin";
    write_shard(path, std::vector<uint32_t>{1, 2, 300, 4}, TokenDType::U16);
    const Shard s(path);
    std::vector<int32_t> out(4);
    EXPECT_THROW(s.read(2, 3, out.data()), Error);
    EXPECT_NO_THROW(s.read(0, 4, out.data(), 301));
    try {
        s.read(1, 3, out.data(), 300);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_NE(msg.find("token 2 is 300"), std::string::npos) << msg;
    }
    EXPECT_EQ(s.find_token_at_least(300), 2u);
    EXPECT_EQ(s.find_token_at_least(301), 4u);
}

TEST(Meta, RoundTripAndShardPaths) {
    const std::string dir = fresh_dir();
    DataMeta m;
    m.tokenizer = "tok.gguf";
    m.n_vocab = 8192;
    m.tokenizer_hash = 0xfedcba9876543210ull;
    m.separator = 2;
    m.val_fraction = 0.02;
    m.chunk_tokens = 2048;
    m.train_tokens = 100;
    m.val_tokens = 10;
    m.train_shards = {"train_000.bin", "train_001.bin"};
    m.val_shards = {"val_000.bin"};
    write_meta(dir, m);
    const DataMeta r = read_meta(dir);
    EXPECT_EQ(r.tokenizer, m.tokenizer);
    EXPECT_EQ(r.n_vocab, m.n_vocab);
    EXPECT_EQ(r.tokenizer_hash, m.tokenizer_hash);
    EXPECT_EQ(r.separator, 2);
    EXPECT_EQ(r.dtype, TokenDType::U16);
    EXPECT_DOUBLE_EQ(r.val_fraction, 0.02);
    EXPECT_EQ(r.train_tokens, 100u);
    EXPECT_EQ(r.train_shards, m.train_shards);
    EXPECT_EQ(r.val_shards, m.val_shards);
    const auto paths = split_shard_paths(dir, "train");
    ASSERT_EQ(paths.size(), 2u);
    EXPECT_EQ(paths[1], (std::filesystem::path(dir) / "train_001.bin").string());
    EXPECT_THROW(split_shard_paths(dir, "test"), Error);

    m.val_shards.clear();
    write_meta(dir, m);
    EXPECT_THROW(split_shard_paths(dir, "val"), Error);
}

TEST(Meta, BadFilesAreNamedErrors) {
    const std::string dir = fresh_dir();
    auto expect_meta_error = [&](const std::string& what) {
        try {
            read_meta(dir);
            ADD_FAILURE() << "no error";
        } catch (const Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find("meta.json"), std::string::npos) << msg;
            EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in " << msg;
        }
    };
    expect_meta_error("cannot open");
    test::write_text(dir + "/meta.json", "{ not json");
    expect_meta_error("not valid JSON");
    test::write_text(dir + "/meta.json",
                     R"({"format": "syslm-token-shards", "format_version": 1})");
    expect_meta_error("missing field \"tokenizer\"");
    DataMeta m;
    m.train_shards = {"../elsewhere.bin"};
    write_meta(dir, m);
    expect_meta_error("plain file name");
}

}  // namespace
}  // namespace syslm::data
