// GGUF metadata arrays and strings are views of their encoding (issue 17): a value read from a
// file costs no memory per element, item(i) finds any element (through the sparse index for
// strings and nested arrays), values round-trip through GGUFWriter byte for byte, and a value
// stays valid after the GGUFFile it came from is gone.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>

#include "core/error.hpp"
#include "io/gguf.hpp"
#include "test_util.hpp"

namespace syslm::io {
namespace {

using test::tmp_path;
using test::read_all;
using test::error_of;

namespace fs = std::filesystem;

// Element i of a test array of element type t: deterministic, different for neighbours, and of
// varying length for strings and nested arrays (so offsets are not multiples of anything).
GGUFValue element(GGUFType t, size_t i) {
    const auto k = static_cast<uint64_t>(i) * 2654435761u + 17;
    switch (t) {
        case GGUFType::U8:
            return GGUFValue::u8(static_cast<uint8_t>(k));
        case GGUFType::I8:
            return GGUFValue::i8(static_cast<int8_t>(k));
        case GGUFType::U16:
            return GGUFValue::u16(static_cast<uint16_t>(k));
        case GGUFType::I16:
            return GGUFValue::i16(static_cast<int16_t>(k));
        case GGUFType::U32:
            return GGUFValue::u32(static_cast<uint32_t>(k));
        case GGUFType::I32:
            return GGUFValue::i32(static_cast<int32_t>(k));
        case GGUFType::U64:
            return GGUFValue::u64(k * 0x9E3779B97F4A7C15ull);
        case GGUFType::I64:
            return GGUFValue::i64(static_cast<int64_t>(k * 0x9E3779B97F4A7C15ull));
        case GGUFType::F32:
            return GGUFValue::f32(static_cast<float>(i) * -0.37f + 1e-3f);
        case GGUFType::F64:
            return GGUFValue::f64(static_cast<double>(i) * 1.5e100 - 3.0);
        case GGUFType::BOOL:
            return GGUFValue::boolean((k >> 3) & 1);
        case GGUFType::STRING:
            return GGUFValue::string(std::string(i % 11, static_cast<char>('a' + i % 26)) +
                                     std::to_string(i));
        case GGUFType::ARRAY:  // nested: arrays of strings of 0..4 elements
        {
            std::vector<std::string> s;
            for (size_t j = 0; j < i % 5; ++j) s.push_back(std::to_string(i * 10 + j));
            return GGUFValue::strings(s);
        }
    }
    return {};
}

GGUFValue make_array(GGUFType t, size_t n) {
    std::vector<GGUFValue> items;
    for (size_t i = 0; i < n; ++i) items.push_back(element(t, i));
    return GGUFValue::array(t, items);
}

// Same type and same content (bits for floats; element by element for arrays).
void expect_same(const GGUFValue& a, const GGUFValue& b, const std::string& where) {
    ASSERT_EQ(a.type(), b.type()) << where;
    if (a.is_array()) {
        ASSERT_EQ(a.array_type(), b.array_type()) << where;
        ASSERT_EQ(a.size(), b.size()) << where;
        const auto x = a.array_bytes(), y = b.array_bytes();
        ASSERT_EQ(x.size(), y.size()) << where;
        EXPECT_EQ(x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0, true) << where;
        for (size_t i = 0; i < a.size(); ++i)
            expect_same(a.item(i), b.item(i), where + "[" + std::to_string(i) + "]");
        return;
    }
    if (a.type() == GGUFType::STRING) {
        EXPECT_EQ(a.as_string_view(), b.as_string_view()) << where;
        return;
    }
    EXPECT_EQ(a.to_display(), b.to_display()) << where;
    if (a.type() == GGUFType::F32 || a.type() == GGUFType::F64) {
        const double x = a.as_f64(), y = b.as_f64();
        EXPECT_EQ(std::memcmp(&x, &y, sizeof x), 0) << where;
    }
}

const GGUFType kAllTypes[] = {GGUFType::U8,   GGUFType::I8,  GGUFType::U16,  GGUFType::I16,
                              GGUFType::U32,  GGUFType::I32, GGUFType::U64,  GGUFType::I64,
                              GGUFType::F32,  GGUFType::F64, GGUFType::BOOL, GGUFType::STRING,
                              GGUFType::ARRAY};
// Around the sparse index's stride (64) and past it.
const size_t kCounts[] = {0, 1, 63, 64, 65, 129, 1000};

TEST(GGUFView, ItemOnEveryTypeAndAwkwardCounts) {
    for (GGUFType t : kAllTypes) {
        for (size_t n : kCounts) {
            const std::string where =
                std::string(gguf_type_name(t)) + "[" + std::to_string(n) + "]";
            const GGUFValue v = make_array(t, n);
            ASSERT_EQ(v.size(), n) << where;
            ASSERT_EQ(v.array_type(), t) << where;
            // item(i) in any order agrees with what was put in, and with the in-order walk.
            for (size_t i = n; i-- > 0;) expect_same(v.item(i), element(t, i), where);
            size_t visited = 0;
            v.for_each_item([&](size_t i, const GGUFValue& x) {
                EXPECT_EQ(i, visited++) << where;
                expect_same(x, element(t, i), where + " walk");
            });
            EXPECT_EQ(visited, n) << where;
            // A limit stops the walk early.
            visited = 0;
            v.for_each_item([&](size_t, const GGUFValue&) { ++visited; }, 5);
            EXPECT_EQ(visited, std::min<size_t>(n, 5)) << where;
            // Fixed-size elements are stored at their own size, nothing more.
            if (const size_t es = gguf_scalar_size(t)) {
                EXPECT_EQ(v.array_bytes().size(), n * es) << where;
            }
            const std::string err = error_of([&] { v.item(n); });
            EXPECT_NE(err.find("array element " + std::to_string(n) + " is out of range"),
                      std::string::npos)
                << err;
            EXPECT_NE(err.find("has " + std::to_string(n) + " elements"), std::string::npos) << err;
        }
    }
    EXPECT_NE(error_of([] { GGUFValue::u32(3).item(0); }).find("expected an array, found u32"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  GGUFValue::string("x").for_each_item([](size_t, const GGUFValue&) {});
              }).find("expected an array, found string"),
              std::string::npos);
    EXPECT_THROW(GGUFValue::u8(1).array_bytes(), Error);
    EXPECT_THROW(GGUFValue::u8(1).as_string_view(), Error);
}

// Every element type and count, written by GGUFWriter and read back (from the mapped file and
// from a caller's buffer): the same values, and the same encoded bytes.
TEST(GGUFView, RoundTripThroughWriterEveryElementType) {
    GGUFWriter w;
    std::vector<std::pair<std::string, GGUFValue>> kv;
    for (GGUFType t : kAllTypes)
        for (size_t n : kCounts)
            kv.emplace_back(std::string(gguf_type_name(t)) + "." + std::to_string(n),
                            make_array(t, n));
    kv.emplace_back("str", GGUFValue::string(std::string("bytes \0\xff", 8)));
    kv.emplace_back("str.empty", GGUFValue::string(""));
    for (const auto& [k, v] : kv) w.set(k, v);
    const std::string path = tmp_path("view_roundtrip.gguf");
    w.write(path);

    const GGUFFile f(path);
    ASSERT_EQ(f.metadata().size(), kv.size());
    for (size_t i = 0; i < kv.size(); ++i) {
        EXPECT_EQ(f.metadata()[i].first, kv[i].first);
        expect_same(f.metadata()[i].second, kv[i].second, kv[i].first);
    }
    const auto bytes = read_all(path);
    const GGUFFile g(std::span<const uint8_t>(bytes), "in-memory");
    for (size_t i = 0; i < kv.size(); ++i) {
        const GGUFValue& v = g.metadata()[i].second;
        expect_same(v, kv[i].second, kv[i].first + " (span)");
        // Parsed strings and arrays are views of the caller's bytes: nothing was copied.
        const auto* lo = bytes.data();
        const auto* hi = bytes.data() + bytes.size();
        if (v.type() == GGUFType::STRING && !v.as_string_view().empty()) {
            const auto* p = reinterpret_cast<const uint8_t*>(v.as_string_view().data());
            EXPECT_TRUE(p >= lo && p < hi) << kv[i].first;
        }
        if (v.is_array() && !v.array_bytes().empty()) {
            EXPECT_TRUE(v.array_bytes().data() >= lo && v.array_bytes().data() < hi) << kv[i].first;
            if (v.array_type() == GGUFType::STRING) {
                const auto* p =
                    reinterpret_cast<const uint8_t*>(v.item(v.size() - 1).as_string_view().data());
                EXPECT_TRUE(p >= lo && p <= hi) << kv[i].first;
            }
        }
    }
    // Copying every value from the file into a new writer reproduces the file byte for byte.
    GGUFWriter copy;
    for (const auto& [k, v] : f.metadata()) copy.set(k, v);
    const std::string path2 = tmp_path("view_roundtrip_copy.gguf");
    copy.write(path2);
    EXPECT_EQ(read_all(path2), bytes);
}

TEST(GGUFView, MaterialisingAccessors) {
    const GGUFValue strs = make_array(GGUFType::STRING, 1000);
    const auto all = strs.as_strings();
    ASSERT_EQ(all.size(), 1000u);
    for (size_t i = 0; i < all.size(); ++i)
        EXPECT_EQ(all[i], element(GGUFType::STRING, i).as_string());
    const GGUFValue u16 = make_array(GGUFType::U16, 130);
    const auto f = u16.as_f32s();
    const auto n = u16.as_i32s();
    ASSERT_EQ(f.size(), 130u);
    for (size_t i = 0; i < 130; ++i) {
        EXPECT_EQ(f[i], static_cast<float>(element(GGUFType::U16, i).as_u64()));
        EXPECT_EQ(n[i], static_cast<int32_t>(element(GGUFType::U16, i).as_u64()));
    }
    const std::vector<float> scores = {1.f, -0.f, std::numeric_limits<float>::infinity()};
    const auto back = GGUFValue::f32s(scores).as_f32s();
    EXPECT_EQ(std::memcmp(back.data(), scores.data(), sizeof(float) * 3), 0);
    // The first element that does not fit is named.
    std::vector<uint32_t> u(100, 5);
    u[77] = 3000000000u;
    const std::string err = error_of([&] { GGUFValue::u32s(u).as_i32s(); });
    EXPECT_NE(err.find("array element 77"), std::string::npos) << err;
    EXPECT_NE(err.find("u32 value 3000000000"), std::string::npos) << err;
    EXPECT_THROW(make_array(GGUFType::ARRAY, 3).as_strings(), Error);
}

TEST(GGUFView, DisplayOfLongAndNestedArrays) {
    const GGUFValue strs = make_array(GGUFType::STRING, 1000);
    EXPECT_EQ(strs.to_display(2), "[\"0\", \"b1\", ... 998 more]");
    EXPECT_EQ(make_array(GGUFType::ARRAY, 4).to_display(),
              "[[], [\"10\"], [\"20\", \"21\"], [\"30\", \"31\", \"32\"]]");
    EXPECT_EQ(make_array(GGUFType::ARRAY, 100).to_display(2), "[[], [\"10\"], ... 98 more]");
    // write_display hands out the same text in pieces.
    std::string pieces;
    size_t calls = 0;
    strs.write_display(
        [&](std::string_view p) {
            pieces += p;
            ++calls;
        },
        0);
    EXPECT_EQ(pieces, strs.to_display(0));
    EXPECT_GT(calls, 1000u);
    EXPECT_EQ(pieces.find("... "), std::string::npos);
}

// A value keeps the bytes it views alive: values taken from a GGUFFile (as `quantize` copies
// metadata into its writer) stay valid after the GGUFFile and its mapping object are gone.
TEST(GGUFView, ValueOutlivesItsFile) {
    GGUFWriter w;
    w.set("strs", make_array(GGUFType::STRING, 1000));
    w.set("nested", make_array(GGUFType::ARRAY, 200));
    w.set("f32", make_array(GGUFType::F32, 65));
    w.set("str", GGUFValue::string("still here"));
    const std::string path = tmp_path("view_outlives.gguf");
    w.write(path);
    const auto original = read_all(path);

    std::vector<std::pair<std::string, GGUFValue>> kept;
    GGUFWriter copy;
    {
        std::optional<GGUFFile> f(std::in_place, path);
        kept = f->metadata();
        for (const auto& [k, v] : f->metadata()) copy.set(k, v);
        f.reset();
    }
    // The file on disk may even be replaced: the mapping keeps the old bytes.
    fs::remove(path);
    EXPECT_EQ(kept[0].second.item(999).as_string(), element(GGUFType::STRING, 999).as_string());
    expect_same(kept[0].second, make_array(GGUFType::STRING, 1000), "strs");
    expect_same(kept[1].second, make_array(GGUFType::ARRAY, 200), "nested");
    expect_same(kept[2].second, make_array(GGUFType::F32, 65), "f32");
    EXPECT_EQ(kept[3].second.as_string_view(), "still here");
    // An element (even a nested view) outlives the array it came from.
    GGUFValue inner;
    {
        const GGUFValue outer = kept[1].second;
        kept.clear();
        inner = outer.item(199);
    }
    EXPECT_EQ(inner.as_strings(), (std::vector<std::string>{"1990", "1991", "1992", "1993"}));
    copy.write(path);
    EXPECT_EQ(read_all(path), original);
}

// Bytes of heap in use, as glibc's malloc counts them (small chunks and mmapped ones).
size_t heap_in_use() {
    const auto m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

// Parsing keeps no per-element copies: the heap grows by the keys and, for arrays of strings or
// arrays, by the sparse index (8 bytes per 64 elements), not by the elements.
TEST(GGUFView, ParsingAllocatesNothingPerElement) {
    {
        // Sanitizers replace malloc, and then mallinfo2 sees nothing.
        const size_t before = heap_in_use();
        const std::vector<uint8_t> probe(1 << 20, 1);
        if (heap_in_use() - before < probe.size())
            GTEST_SKIP() << "mallinfo2 does not see this build's allocator";
    }
    const size_t n = 4'000'000;
    std::vector<uint8_t> file;
    auto put = [&](const void* p, size_t k) {
        const auto* b = static_cast<const uint8_t*>(p);
        file.insert(file.end(), b, b + k);
    };
    auto u32 = [&](uint32_t v) { put(&v, 4); };
    auto u64 = [&](uint64_t v) { put(&v, 8); };
    auto str = [&](std::string_view s) {
        u64(s.size());
        put(s.data(), s.size());
    };
    u32(0x46554747);
    u32(3);
    u64(0);
    u64(2);
    str("bytes");
    u32(9);
    u32(0);
    u64(n);
    file.resize(file.size() + n, 7);
    str("strings");
    u32(9);
    u32(8);
    u64(n);
    for (size_t i = 0; i < n; ++i) str(i % 2 ? "ab" : "");

    const size_t before = heap_in_use();
    size_t during = 0;
    {
        const GGUFFile f(std::span<const uint8_t>(file), "big.gguf");
        during = heap_in_use() - before;
        EXPECT_EQ(f.get("bytes").size(), n);
        EXPECT_EQ(f.get("bytes").item(n - 1).as_u32(), 7u);
        EXPECT_EQ(f.get("strings").size(), n);
        EXPECT_EQ(f.get("strings").item(n - 1).as_string(), "ab");
        EXPECT_EQ(f.get("strings").item(n - 2).as_string(), "");
        EXPECT_EQ(f.get("strings").to_display(3), "[\"\", \"ab\", \"\", ... 3999997 more]");
    }
    // The index of the strings is n / 64 * 8 bytes = 500 KB; anything per element would be MBs.
    EXPECT_LT(during, n / 64 * 8 + 64 * 1024) << "heap bytes held by the parsed file";
    EXPECT_GE(during, n / 64 * 8) << "the sparse index is expected to be there";
}

TEST(GGUFView, NestingLimit) {
    GGUFValue v = GGUFValue::u32s(std::vector<uint32_t>{1, 2});
    for (int level = 2; level <= kGGUFMaxArrayDepth; ++level)
        v = GGUFValue::array(GGUFType::ARRAY, {v});
    // 32 levels are written and read back.
    GGUFWriter w;
    w.set("deep", v);
    const std::string path = tmp_path("view_deep.gguf");
    w.write(path);
    const GGUFFile f(path);
    GGUFValue x = f.get("deep");
    for (int level = 1; level < kGGUFMaxArrayDepth; ++level) x = x.item(0);
    EXPECT_EQ(x.as_i32s(), (std::vector<int32_t>{1, 2}));
    // A 33rd is refused where it is built.
    const std::string err = error_of([&] { GGUFValue::array(GGUFType::ARRAY, {v}); });
    EXPECT_NE(err.find("nested deeper than 32 levels"), std::string::npos) << err;
}

}  // namespace
}  // namespace syslm::io
