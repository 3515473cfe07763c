// Malformed GGUF files, built byte by byte: each must give one Error that names the file, says
// what is wrong and, for a bad field, the byte offset of that field. Never a crash.
#include <gtest/gtest.h>

#include <limits>

#include "core/error.hpp"
#include "io/gguf.hpp"

namespace syslm::io {
namespace {

constexpr const char* kName = "bad.gguf";

// Little-endian byte builder following the spec's field layout.
struct Bytes {
    std::vector<uint8_t> b;
    size_t pos() const { return b.size(); }
    Bytes& u8(uint8_t v) {
        b.push_back(v);
        return *this;
    }
    Bytes& u32(uint32_t v) {
        for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
        return *this;
    }
    Bytes& u64(uint64_t v) {
        for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i)));
        return *this;
    }
    Bytes& str(std::string_view s) {
        u64(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
    }
    Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
    // A tensor info; returns *this. Type ids are GGML's (0 = F32, 2 = Q4_0).
    Bytes& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(ne.size()));
        for (uint64_t d : ne) u64(d);
        return u32(type).u64(offset);
    }
    Bytes& pad(size_t align = 32) {
        while (b.size() % align) b.push_back(0);
        return *this;
    }
    Bytes& zeros(size_t n) {
        b.insert(b.end(), n, 0);
        return *this;
    }
};

// Parses and returns the error message ("" when parsing succeeded).
std::string parse_error(const std::vector<uint8_t>& bytes) {
    try {
        GGUFFile f(std::span<const uint8_t>(bytes), kName);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// The message names the file, contains every fragment, and (if given) the byte offset.
void expect_error(const std::vector<uint8_t>& bytes, std::vector<std::string> fragments,
                  int64_t at = -1) {
    const std::string msg = parse_error(bytes);
    ASSERT_FALSE(msg.empty()) << "parsed without error";
    EXPECT_EQ(msg.rfind(kName, 0), 0u) << msg;
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << f << " | " << msg;
    if (at >= 0) {
        EXPECT_NE(msg.find("at byte " + std::to_string(at) + ")"), std::string::npos) << msg;
    }
}

// A valid file with metadata and two tensors, used to cut and corrupt.
Bytes valid_file() {
    Bytes f;
    f.header(2, 2).kv_u32("a.u32", 7);
    f.str("a.arr").u32(9).u32(8).u64(2).str("xy").str("z");
    f.tensor("t0", {8, 2}, 0, 0).tensor("t1", {32}, 2, 64).pad();
    f.zeros(64 + 18).pad();
    return f;
}

TEST(GGUFMalformed, ValidBaseFileParses) {
    const Bytes f = valid_file();
    EXPECT_EQ(parse_error(f.b), "");
    const GGUFFile g(std::span<const uint8_t>(f.b), kName);
    EXPECT_EQ(g.tensors()[1].nbytes, 18u);
    EXPECT_EQ(g.get("a.arr").as_strings(), (std::vector<std::string>{"xy", "z"}));
}

// Every prefix of a valid file fails cleanly: "truncated" while the header, metadata or tensor
// infos are cut, "beyond the end of the file" once only tensor data is missing.
TEST(GGUFMalformed, TruncatedAnywhere) {
    const Bytes full = valid_file();
    const GGUFFile g(std::span<const uint8_t>(full.b), kName);
    const size_t end = g.data_offset() + g.tensors()[1].offset + g.tensors()[1].nbytes;
    for (size_t n = 0; n < end; ++n) {
        const std::vector<uint8_t> cut(full.b.begin(), full.b.begin() + n);
        const std::string msg = parse_error(cut);
        ASSERT_FALSE(msg.empty()) << "prefix of " << n << " bytes parsed";
        EXPECT_EQ(msg.rfind(kName, 0), 0u) << msg;
        if (n < g.data_offset()) {
            EXPECT_NE(msg.find("truncated"), std::string::npos) << n << ": " << msg;
        } else {
            EXPECT_NE(msg.find("beyond the end of the file"), std::string::npos)
                << n << ": " << msg;
        }
    }
    // The padding after the last tensor is optional.
    for (size_t n = end; n <= full.b.size(); ++n)
        EXPECT_EQ(parse_error(std::vector<uint8_t>(full.b.begin(), full.b.begin() + n)), "");
    expect_error({}, {"truncated", "too short"}, 0);
    const auto header = Bytes().header(0, 0).b;
    expect_error({header.begin(), header.begin() + 12}, {"truncated", "tensor count"}, 8);
    expect_error(Bytes().header(0, 1).str("general.name").b,
                 {"truncated", "value type", "key 'general.name'"}, 44);
}

TEST(GGUFMalformed, BadMagic) {
    Bytes f = valid_file();
    f.b[0] = 'g';
    expect_error(f.b, {"not a GGUF file", "bad magic 'gGUF'"}, 0);
    f.b[0] = 0x89;
    expect_error(f.b, {"bad magic '\\x89GUF'"}, 0);
}

TEST(GGUFMalformed, UnsupportedVersions) {
    expect_error(Bytes().header(0, 0, 1).b, {"version 1 is not supported"}, 4);
    expect_error(Bytes().header(0, 0, 4).b, {"unsupported GGUF version 4"}, 4);
    expect_error(Bytes().header(0, 0, 0).b, {"unsupported GGUF version 0"}, 4);
    expect_error(Bytes().header(0, 0, 0x03000000).b, {"big-endian"}, 4);
    // Version 2 has the same layout as 3 and is accepted.
    EXPECT_EQ(parse_error(Bytes().header(0, 1, 2).kv_u32("k", 1).b), "");
}

TEST(GGUFMalformed, AbsurdCountsAndLengthsAllocateNothing) {
    // Counts that claim more entries than the file could hold are refused up front.
    expect_error(Bytes().header(0, uint64_t{1} << 62).zeros(100).b,
                 {"absurd metadata key count 4611686018427387904", "hold at most 7"}, 16);
    expect_error(Bytes().header(std::numeric_limits<uint64_t>::max(), 0).zeros(64).b,
                 {"absurd tensor count 18446744073709551615", "hold at most 2"}, 8);
    // A key whose length is larger than the file.
    expect_error(Bytes().header(0, 1).u64(std::numeric_limits<uint64_t>::max()).zeros(10).b,
                 {"absurd length", "key", "claims 18446744073709551615 bytes"}, 24);
    // A string value of 2^40 bytes.
    expect_error(Bytes().header(0, 1).str("s").u32(8).u64(uint64_t{1} << 40).zeros(5).b,
                 {"key 's'", "string value claims 1099511627776 bytes"}, 37);
    // An array of 2^60 u32 in a tiny file; and 100 strings with 8 bytes left.
    expect_error(Bytes().header(0, 1).str("a").u32(9).u32(4).u64(uint64_t{1} << 60).zeros(16).b,
                 {"absurd array length 1152921504606846976", "at most 4 elements of type u32"}, 41);
    expect_error(Bytes().header(0, 1).str("a").u32(9).u32(8).u64(100).u64(0).b,
                 {"absurd array length 100", "at most 1 elements of type string"}, 41);
    // A tensor count that passes the coarse bound but runs out of tensor infos.
    expect_error(Bytes().header(2, 0).tensor("t", {4}, 0, 0).u64(100).zeros(23).b,
                 {"tensor #1", "truncated", "tensor name claims 100 bytes"}, 57);
}

TEST(GGUFMalformed, InvalidValueTypes) {
    expect_error(Bytes().header(0, 1).str("k").u32(13).u32(0).b,
                 {"key 'k'", "invalid value type 13"}, 33);
    expect_error(Bytes().header(0, 1).str("k").u32(0xFFFFFFFF).u32(0).b,
                 {"invalid value type 4294967295"}, 33);
    expect_error(Bytes().header(0, 1).str("k").u32(9).u32(77).u64(0).b,
                 {"key 'k'", "invalid value type 77"}, 37);
    // Nested array whose inner element type is bad.
    expect_error(Bytes().header(0, 1).str("k").u32(9).u32(9).u64(1).u32(13).u64(0).b,
                 {"invalid value type 13"}, 49);
    expect_error(Bytes().header(0, 1).str("k").u32(7).u8(2).b, {"invalid bool value 2"}, 37);
}

TEST(GGUFMalformed, InvalidUtf8IsAllowed) {
    const Bytes f = Bytes()
                        .header(0, 2)
                        .str("k\xff")
                        .u32(8)
                        .str("\xc3\x28\xa0\xa1")
                        .str("t")
                        .u32(9)
                        .u32(8)
                        .u64(1)
                        .str("\xed\xa0\x80");
    const GGUFFile g(std::span<const uint8_t>(f.b), kName);
    EXPECT_EQ(g.metadata()[0].first, "k\xff");
    EXPECT_EQ(g.metadata()[0].second.as_string(), "\xc3\x28\xa0\xa1");
    EXPECT_EQ(g.get("t").as_strings()[0], "\xed\xa0\x80");
}

TEST(GGUFMalformed, DeeplyNestedArrays) {
    Bytes f = Bytes().header(0, 1).str("k");
    f.u32(9);
    for (int i = 0; i < 1000; ++i) f.u32(9).u64(1);
    f.u32(0).u64(0);
    expect_error(f.b, {"nested deeper than"});
}

TEST(GGUFMalformed, DuplicateKey) {
    Bytes f = Bytes().header(0, 2).kv_u32("dup", 1);
    const size_t at = f.pos();
    f.kv_u32("dup", 2);
    expect_error(f.b, {"duplicate key 'dup'"}, at);
}

TEST(GGUFMalformed, BadAlignment) {
    for (uint32_t a : {0u, 3u, 48u, 1u << 31}) {
        const Bytes f = Bytes().header(0, 1).kv_u32("general.alignment", a);
        expect_error(f.b, {"general.alignment", "is " + std::to_string(a), "power of two"});
    }
    expect_error(Bytes().header(0, 1).str("general.alignment").u32(8).str("32").b,
                 {"general.alignment", "expected a non-negative integer, found string"});
    // A valid non-default alignment is honoured.
    Bytes ok = Bytes().header(1, 1).kv_u32("general.alignment", 8).tensor("t", {2}, 0, 0).pad(8);
    ok.zeros(8);
    const GGUFFile g(std::span<const uint8_t>(ok.b), kName);
    EXPECT_EQ(g.alignment(), 8u);
    EXPECT_EQ(g.data_offset(), ok.b.size() - 8);
}

TEST(GGUFMalformed, BadDimensions) {
    auto with_tensor = [](std::vector<uint64_t> ne, uint32_t type = 0, uint64_t off = 0) {
        return Bytes().header(1, 0).tensor("w", std::move(ne), type, off).pad().zeros(64).b;
    };
    expect_error(with_tensor({}), {"tensor 'w'", "n_dims is 0", "1..4"}, 33);
    expect_error(with_tensor({1, 1, 1, 1, 1}), {"tensor 'w'", "n_dims is 5"}, 33);
    expect_error(with_tensor({4, 0}), {"tensor 'w'", "dimension 1 is 0"}, 45);
    expect_error(with_tensor({std::numeric_limits<uint64_t>::max()}),
                 {"dimension 0 is -1", "must be positive"}, 37);
    expect_error(with_tensor({uint64_t{1} << 40, uint64_t{1} << 30}),
                 {"element count overflows", "dimension 1"}, 45);
    // Fits in int64 but is far larger than the file.
    expect_error(with_tensor({uint64_t{1} << 31, uint64_t{1} << 31}),
                 {"larger than the whole file"});
}

TEST(GGUFMalformed, UnknownTensorType) {
    expect_error(Bytes().header(1, 0).tensor("w", {32}, 16, 0).pad().zeros(64).b,
                 {"tensor 'w'", "type id 16", "IQ2_XXS", "not supported"}, 45);
    expect_error(Bytes().header(1, 0).tensor("w", {32}, 1000, 0).pad().zeros(64).b,
                 {"tensor 'w'", "unknown tensor type id 1000"}, 45);
    // syslm's load-time layouts have ids too, but never belong in a file.
    expect_error(Bytes()
                     .header(1, 0)
                     .tensor("w", {256}, static_cast<uint32_t>(DType::Q4_0_G8), 0)
                     .pad()
                     .zeros(160)
                     .b,
                 {"tensor 'w'", "unknown tensor type id 65538"}, 45);
}

TEST(GGUFMalformed, RowNotWholeBlocks) {
    expect_error(Bytes().header(1, 0).tensor("q", {33, 2}, 2, 0).pad().zeros(64).b,
                 {"tensor 'q'", "row length 33", "Q4_0 block size 32"});
    expect_error(Bytes().header(1, 0).tensor("k", {128}, 12, 0).pad().zeros(256).b,
                 {"tensor 'k'", "row length 128", "Q4_K block size 256"});
}

TEST(GGUFMalformed, MisalignedOffset) {
    Bytes f = Bytes().header(2, 0).tensor("a", {4}, 0, 0);
    const size_t at = f.pos() + 8 + 1 + 4 + 8 + 4;  // the offset field of tensor "b"
    f.tensor("b", {4}, 0, 20).pad().zeros(64);
    expect_error(f.b, {"tensor 'b'", "offset 20 is not a multiple of the alignment 32"}, at);
}

TEST(GGUFMalformed, DataBeyondEndOfFile) {
    // Offset past the end.
    expect_error(Bytes().header(1, 0).tensor("w", {4}, 0, 1024).pad().zeros(16).b,
                 {"tensor 'w'", "beyond the end of the file"});
    // Offset inside, size past the end.
    expect_error(Bytes().header(1, 0).tensor("w", {64}, 0, 0).pad().zeros(255).b,
                 {"tensor 'w'", "beyond the end of the file"});
    // Huge offset that would overflow offset + size.
    expect_error(
        Bytes().header(1, 0).tensor("w", {4}, 0, uint64_t{0xFFFFFFFFFFFFFFE0}).pad().zeros(16).b,
        {"tensor 'w'", "beyond the end of the file"});
    // Data section itself starts beyond the end (no padding, no data).
    expect_error(Bytes().header(1, 0).tensor("w", {4}, 0, 0).b,
                 {"tensor data section starts at byte 64"});
}

TEST(GGUFMalformed, OverlappingTensors) {
    // a is [32, 96), b is [64, 128) of the data section.
    expect_error(
        Bytes().header(2, 0).tensor("a", {16}, 0, 32).tensor("b", {16}, 0, 64).pad().zeros(128).b,
        {"tensors 'a'", "'b'", "overlap"});
    // Same offset twice, listed out of order.
    expect_error(Bytes()
                     .header(3, 0)
                     .tensor("x", {8}, 0, 64)
                     .tensor("y", {8}, 0, 0)
                     .tensor("z", {8}, 0, 64)
                     .pad()
                     .zeros(128)
                     .b,
                 {"overlap"});
}

TEST(GGUFMalformed, DuplicateTensorName) {
    Bytes f = Bytes().header(2, 0).tensor("w", {8}, 0, 0);
    const size_t at = f.pos();
    f.tensor("w", {8}, 0, 32).pad().zeros(64);
    expect_error(f.b, {"duplicate tensor name 'w'"}, at);
}

TEST(GGUFMalformed, FileErrorsNameThePath) {
    try {
        GGUFFile f("/nonexistent/dir/model.gguf");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/model.gguf"), std::string::npos);
    }
}

}  // namespace
}  // namespace syslm::io
