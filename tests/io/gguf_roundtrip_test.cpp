// GGUF writer -> reader round trips, the writer's byte layout checked against the spec by hand,
// and the real vocabulary files of tests/fixtures/vocab (written by llama.cpp's gguf-py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "core/error.hpp"
#include "io/gguf.hpp"
#include "test_util.hpp"

namespace syslm::io {
namespace {

using test::tmp_path;
using test::read_all;

namespace fs = std::filesystem;

// Values are equal when type, array type, and bits agree (NaN payloads and -0.0 included).
void expect_same(const GGUFValue& a, const GGUFValue& b, const std::string& where) {
    ASSERT_EQ(a.type(), b.type()) << where;
    switch (a.type()) {
        case GGUFType::U8:
        case GGUFType::U16:
        case GGUFType::U32:
        case GGUFType::U64:
        case GGUFType::BOOL:
            EXPECT_EQ(a.as_u64(), b.as_u64()) << where;
            break;
        case GGUFType::I8:
        case GGUFType::I16:
        case GGUFType::I32:
        case GGUFType::I64:
            EXPECT_EQ(a.as_i64(), b.as_i64()) << where;
            break;
        case GGUFType::F32: {
            const float x = a.as_f32(), y = b.as_f32();
            EXPECT_EQ(std::memcmp(&x, &y, 4), 0) << where;
            break;
        }
        case GGUFType::F64: {
            const double x = a.as_f64(), y = b.as_f64();
            EXPECT_EQ(std::memcmp(&x, &y, 8), 0) << where;
            break;
        }
        case GGUFType::STRING:
            EXPECT_EQ(a.as_string(), b.as_string()) << where;
            break;
        case GGUFType::ARRAY:
            ASSERT_EQ(a.array_type(), b.array_type()) << where;
            ASSERT_EQ(a.size(), b.size()) << where;
            for (size_t i = 0; i < a.size(); ++i)
                expect_same(a.item(i), b.item(i), where + "[" + std::to_string(i) + "]");
            break;
    }
}

std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
}

// One value of every type, edge values included, arrays of every element type, nested arrays.
std::vector<std::pair<std::string, GGUFValue>> every_value_type() {
    std::vector<std::pair<std::string, GGUFValue>> kv;
    kv.emplace_back("t.u8", GGUFValue::u8(255));
    kv.emplace_back("t.i8", GGUFValue::i8(-128));
    kv.emplace_back("t.u16", GGUFValue::u16(65535));
    kv.emplace_back("t.i16", GGUFValue::i16(-32768));
    kv.emplace_back("t.u32", GGUFValue::u32(4294967295u));
    kv.emplace_back("t.i32", GGUFValue::i32(std::numeric_limits<int32_t>::min()));
    kv.emplace_back("t.u64", GGUFValue::u64(std::numeric_limits<uint64_t>::max()));
    kv.emplace_back("t.i64", GGUFValue::i64(std::numeric_limits<int64_t>::min()));
    kv.emplace_back("t.f32", GGUFValue::f32(-0x1.234568p-100f));
    kv.emplace_back("t.f32.neg0", GGUFValue::f32(-0.0f));
    kv.emplace_back("t.f32.nan", GGUFValue::f32(std::numeric_limits<float>::quiet_NaN()));
    kv.emplace_back("t.f32.inf", GGUFValue::f32(-std::numeric_limits<float>::infinity()));
    kv.emplace_back("t.f64", GGUFValue::f64(3.141592653589793e300));
    kv.emplace_back("t.f64.denorm", GGUFValue::f64(std::numeric_limits<double>::denorm_min()));
    kv.emplace_back("t.bool.true", GGUFValue::boolean(true));
    kv.emplace_back("t.bool.false", GGUFValue::boolean(false));
    kv.emplace_back("t.string", GGUFValue::string("Grüße, 世界 🌍"));
    kv.emplace_back("t.string.empty", GGUFValue::string(""));
    // Strings are bytes: invalid UTF-8 and NULs survive.
    kv.emplace_back("t.string.bytes", GGUFValue::string(std::string("\xff\xfe\0a\x80", 5)));
    kv.emplace_back("", GGUFValue::string("empty key"));

    std::mt19937 rng(1234);
    auto arr = [&](GGUFType t, size_t n, auto make) {
        std::vector<GGUFValue> items;
        for (size_t i = 0; i < n; ++i) items.push_back(make(rng));
        return GGUFValue::array(t, std::move(items));
    };
    kv.emplace_back("a.u8", arr(GGUFType::U8, 37, [](auto& r) { return GGUFValue::u8(r()); }));
    kv.emplace_back("a.i8", arr(GGUFType::I8, 3, [](auto& r) { return GGUFValue::i8(r()); }));
    kv.emplace_back("a.u16", arr(GGUFType::U16, 5, [](auto& r) { return GGUFValue::u16(r()); }));
    kv.emplace_back("a.i16", arr(GGUFType::I16, 7, [](auto& r) { return GGUFValue::i16(r()); }));
    kv.emplace_back("a.u32", arr(GGUFType::U32, 11, [](auto& r) { return GGUFValue::u32(r()); }));
    kv.emplace_back("a.i32", arr(GGUFType::I32, 13, [](auto& r) { return GGUFValue::i32(r()); }));
    kv.emplace_back("a.u64", arr(GGUFType::U64, 2, [](auto& r) {
                        return GGUFValue::u64((uint64_t(r()) << 32) | r());
                    }));
    kv.emplace_back("a.i64", arr(GGUFType::I64, 3, [](auto& r) {
                        return GGUFValue::i64(int64_t((uint64_t(r()) << 32) | r()));
                    }));
    kv.emplace_back("a.f32", arr(GGUFType::F32, 17, [](auto& r) {
                        return GGUFValue::f32(std::normal_distribution<float>(0, 100)(r));
                    }));
    kv.emplace_back("a.f64", arr(GGUFType::F64, 19, [](auto& r) {
                        return GGUFValue::f64(std::normal_distribution<double>(0, 1e10)(r));
                    }));
    kv.emplace_back("a.bool",
                    arr(GGUFType::BOOL, 9, [](auto& r) { return GGUFValue::boolean(r() & 1); }));
    kv.emplace_back("a.string", GGUFValue::strings({"<s>", "", "▁the", std::string(1, '\0'), "x"}));
    kv.emplace_back("a.empty", GGUFValue::array(GGUFType::F32, {}));
    kv.emplace_back(
        "a.nested",
        GGUFValue::array(GGUFType::ARRAY, {GGUFValue::strings({"a", "bc"}), GGUFValue::strings({}),
                                           GGUFValue::i32s(std::vector<int32_t>{-1, 2, -3})}));
    // Three levels: array of arrays of arrays.
    const auto inner =
        GGUFValue::array(GGUFType::ARRAY, {GGUFValue::u32s(std::vector<uint32_t>{7})});
    kv.emplace_back("a.nested3", GGUFValue::array(GGUFType::ARRAY, {inner, inner}));
    kv.emplace_back("a.empty_nested", GGUFValue::array(GGUFType::ARRAY, {}));
    return kv;
}

struct TensorSpec {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
};

void round_trip(size_t alignment) {
    GGUFWriter w;
    const auto kv = every_value_type();
    for (const auto& [k, v] : kv) w.set(k, v);
    if (alignment != kGGUFDefaultAlignment) w.set("general.alignment", GGUFValue::u32(alignment));

    const std::vector<TensorSpec> specs = {
        {"token_embd.weight", DType::F32, {7, 13}},
        {"blk.0.attn_q.weight", DType::F16, {3, 5, 2}},
        {"blk.0.ffn_up.weight", DType::Q8_0, {96, 3}},
        {"blk.0.ffn_down.weight", DType::Q4_K, {512, 2}},
        {"blk.0.attn_norm.weight", DType::BF16, {1}},
        {"positions", DType::I32, {2, 3, 1, 5}},
        {"blk.1.ffn_gate.weight", DType::Q6_K, {256, 1, 3}},
        {"output.weight", DType::Q4_0, {32, 9}},
    };
    std::mt19937 rng(99);
    std::vector<std::vector<uint8_t>> datas;
    for (size_t i = 0; i < specs.size(); ++i) {
        const auto& s = specs[i];
        int64_t rows = 1;
        for (size_t d = 1; d < s.ne.size(); ++d) rows *= s.ne[d];
        datas.push_back(random_bytes(rng, row_bytes(s.type, s.ne[0]) * rows));
        if (i % 2 == 0) {
            w.add_tensor(s.name, s.type, s.ne, datas.back().data(), datas.back().size());
        } else {
            w.add_tensor(s.name, s.type, s.ne, datas.back());  // owned copy
        }
    }
    const std::string path = tmp_path("roundtrip_" + std::to_string(alignment) + ".gguf");
    w.write(path);

    const GGUFFile f(path);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.data_offset() % alignment, 0u);
    const size_t n_kv = kv.size() + (alignment != kGGUFDefaultAlignment ? 1 : 0);
    ASSERT_EQ(f.metadata().size(), n_kv);
    for (size_t i = 0; i < kv.size(); ++i) {
        EXPECT_EQ(f.metadata()[i].first, kv[i].first);  // insertion order
        expect_same(f.metadata()[i].second, kv[i].second, kv[i].first);
    }
    ASSERT_EQ(f.tensors().size(), specs.size());
    const uint8_t* file_start = f.tensors()[0].data - f.data_offset() - f.tensors()[0].offset;
    for (size_t i = 0; i < specs.size(); ++i) {
        const GGUFTensor& t = f.tensors()[i];
        EXPECT_EQ(t.name, specs[i].name);
        EXPECT_EQ(t.type, specs[i].type);
        EXPECT_EQ(t.ne, specs[i].ne);
        EXPECT_EQ(t.nbytes, datas[i].size());
        EXPECT_EQ(t.offset % alignment, 0u) << t.name;
        EXPECT_EQ(static_cast<size_t>(t.data - file_start) % alignment, 0u) << t.name;
        EXPECT_EQ(std::memcmp(t.data, datas[i].data(), t.nbytes), 0) << t.name;
        EXPECT_EQ(&f.tensor(t.name), &t);
    }
    EXPECT_EQ(f.tensor("positions").numel(), 30);
    EXPECT_EQ(f.tensor("positions").rows(), 15);
    // Tensors are packed: each starts at the previous end rounded up to the alignment.
    for (size_t i = 1; i < specs.size(); ++i) {
        const auto& a = f.tensors()[i - 1];
        EXPECT_EQ(f.tensors()[i].offset,
                  (a.offset + a.nbytes + alignment - 1) / alignment * alignment);
    }
    EXPECT_EQ(f.file_size() % alignment, 0u);  // the last tensor is padded too

    // The same bytes parsed from memory give the same result.
    const auto bytes = read_all(path);
    const GGUFFile g(std::span<const uint8_t>(bytes), "in-memory");
    EXPECT_EQ(g.path(), "in-memory");
    ASSERT_EQ(g.tensors().size(), specs.size());
    EXPECT_EQ(g.tensors()[3].data, bytes.data() + g.data_offset() + g.tensors()[3].offset);
}

TEST(GGUFRoundTrip, EveryValueTypeAndTensorTypeDefaultAlignment) {
    round_trip(32);
}
TEST(GGUFRoundTrip, CustomAlignments) {
    round_trip(1);
    round_trip(64);
    round_trip(4096);
}

TEST(GGUFRoundTrip, GettersNameFileAndKey) {
    GGUFWriter w;
    w.set("general.architecture", GGUFValue::string("llama"));
    w.set("llama.block_count", GGUFValue::u32(3));
    w.set("llama.rope.freq_base", GGUFValue::f32(10000.f));
    w.set("tokenizer.ggml.add_bos_token", GGUFValue::boolean(true));
    w.set("neg", GGUFValue::i32(-4));
    const std::string path = tmp_path("getters.gguf");
    w.write(path);
    const GGUFFile f(path);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_u32("llama.block_count"), 3u);
    EXPECT_EQ(f.get_f32("llama.rope.freq_base"), 10000.f);
    EXPECT_EQ(f.get_f32("llama.block_count"), 3.f);
    EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
    EXPECT_EQ(f.get_u32("missing", 77), 77u);
    EXPECT_EQ(f.get_string("missing", "x"), "x");
    EXPECT_EQ(f.get_f32("missing", 0.5f), 0.5f);
    EXPECT_FALSE(f.get_bool("missing", false));
    EXPECT_EQ(f.find("missing"), nullptr);
    EXPECT_EQ(f.find_tensor("missing"), nullptr);
    try {
        f.get_u32("neg", 1);  // present with the wrong sign: still an error
        FAIL();
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(path), std::string::npos) << m;
        EXPECT_NE(m.find("neg"), std::string::npos) << m;
    }
    try {
        f.get_string("general.name");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("missing key general.name"), std::string::npos);
    }
    try {
        f.tensor("output.weight");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("output.weight"), std::string::npos);
    }
}

TEST(GGUFWriter, KeysKeepFirstInsertionOrder) {
    GGUFWriter w;
    w.set("b", GGUFValue::u8(1));
    w.set("a", GGUFValue::u8(2));
    w.set("c", GGUFValue::u8(3));
    w.set("b", GGUFValue::string("replaced"));
    w.remove("a");
    w.remove("not-there");
    const std::string path = tmp_path("order.gguf");
    w.write(path);
    const GGUFFile f(path);
    ASSERT_EQ(f.metadata().size(), 2u);
    EXPECT_EQ(f.metadata()[0].first, "b");
    EXPECT_EQ(f.metadata()[0].second.as_string(), "replaced");
    EXPECT_EQ(f.metadata()[1].first, "c");
}

// The layout of a small file written out by hand from the spec, so that the writer and the
// reader cannot agree on a mistake.
TEST(GGUFWriter, BytesMatchTheSpec) {
    GGUFWriter w;
    w.set("k", GGUFValue::u16(0x1234));
    w.set("s", GGUFValue::strings({"ab"}));
    const std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6, 7, 8};
    w.add_tensor("w", DType::F16, {2, 2}, data);
    const std::string path = tmp_path("spec.gguf");
    w.write(path);

    std::vector<uint8_t> e;
    auto u32 = [&](uint32_t v) {
        for (int i = 0; i < 4; ++i) e.push_back(uint8_t(v >> (8 * i)));
    };
    auto u64 = [&](uint64_t v) {
        for (int i = 0; i < 8; ++i) e.push_back(uint8_t(v >> (8 * i)));
    };
    auto str = [&](std::string_view s) {
        u64(s.size());
        e.insert(e.end(), s.begin(), s.end());
    };
    for (char c : {'G', 'G', 'U', 'F'}) e.push_back(static_cast<uint8_t>(c));
    u32(3);  // version
    u64(1);  // tensors
    u64(2);  // kv
    str("k");
    u32(2);  // u16
    e.push_back(0x34);
    e.push_back(0x12);
    str("s");
    u32(9);  // array
    u32(8);  // of strings
    u64(1);
    str("ab");
    str("w");
    u32(2);  // n_dims
    u64(2);
    u64(2);
    u32(1);  // F16
    u64(0);  // offset
    while (e.size() % 32) e.push_back(0);
    e.insert(e.end(), data.begin(), data.end());
    while (e.size() % 32) e.push_back(0);
    EXPECT_EQ(read_all(path), e);
}

TEST(GGUFWriter, RejectsInvalidTensorsAndAlignment) {
    GGUFWriter w;
    const std::vector<uint8_t> q(34 * 2);
    EXPECT_THROW(w.add_tensor("x", DType::Q8_0, {33, 2}, q), Error);  // not whole blocks
    EXPECT_THROW(w.add_tensor("x", DType::Q8_0, {32, 3}, q), Error);  // wrong byte count
    EXPECT_THROW(w.add_tensor("x", DType::Q8_0, {}, q), Error);       // no dims
    EXPECT_THROW(w.add_tensor("x", DType::Q8_0, {32, 1, 1, 1, 2}, q), Error);
    EXPECT_THROW(w.add_tensor("x", DType::Q8_0, {32, 0}, q), Error);
    EXPECT_THROW(w.add_tensor("x", static_cast<DType>(16), {32, 2}, q), Error);
    EXPECT_THROW(w.add_tensor(std::string(64, 'n'), DType::Q8_0, {32, 2}, q), Error);
    w.add_tensor("x", DType::Q8_0, {32, 2}, q);
    EXPECT_THROW(w.add_tensor("x", DType::Q8_0, {32, 2}, q), Error);  // duplicate
    EXPECT_THROW(w.set("general.alignment", GGUFValue::u32(48)), Error);
    EXPECT_THROW(w.set("general.alignment", GGUFValue::u32(0)), Error);
    EXPECT_THROW(w.set("general.alignment", GGUFValue::string("32")), Error);
    // Any integer type is stored as the u32 the spec asks for.
    w.set("general.alignment", GGUFValue::u64(16));
    const std::string path = tmp_path("align16.gguf");
    w.write(path);
    const GGUFFile f(path);
    EXPECT_EQ(f.alignment(), 16u);
    EXPECT_EQ(f.get("general.alignment").type(), GGUFType::U32);
}

TEST(GGUFWriter, WriteIsAtomic) {
    const std::string path = tmp_path("atomic.gguf");
    GGUFWriter a;
    a.set("v", GGUFValue::u32(1));
    a.write(path);
    GGUFWriter b;
    b.set("v", GGUFValue::u32(2));
    b.write(path);  // replaces the old file as a whole
    EXPECT_EQ(GGUFFile(path).get_u32("v"), 2u);
    for (const auto& entry : fs::directory_iterator(SYSLM_TEST_TMP))
        EXPECT_EQ(entry.path().filename().string().find("atomic.gguf.tmp"), std::string::npos);
    EXPECT_THROW(b.write(std::string(SYSLM_TEST_TMP) + "/no/such/dir/x.gguf"), Error);
}

TEST(GGUFWriter, GeneratedTensorsAreFilledAtWriteTime) {
    const std::string path = tmp_path("generated.gguf");
    GGUFWriter w;
    int calls = 0;
    w.add_tensor("gen", DType::F32, {5, 3}, 60, [&](uint8_t* dst) {
        ++calls;
        for (int i = 0; i < 15; ++i) {
            const float v = 0.5f * static_cast<float>(i) - 3.25f;
            std::memcpy(dst + 4 * i, &v, 4);
        }
    });
    EXPECT_EQ(calls, 0);  // nothing is produced before write()
    EXPECT_THROW(w.add_tensor("bad", DType::F32, {5, 3}, 59, [](uint8_t*) {}), Error);
    w.write(path);
    EXPECT_EQ(calls, 1);
    const GGUFFile f(path);
    const auto* data = reinterpret_cast<const float*>(f.tensor("gen").data);
    for (int i = 0; i < 15; ++i) EXPECT_EQ(data[i], 0.5f * static_cast<float>(i) - 3.25f);

    // A failing generator aborts the write and leaves the previous file in place.
    GGUFWriter failing;
    failing.add_tensor("gen", DType::F32, {4}, 16,
                       [](uint8_t*) { throw Error("generator failed"); });
    EXPECT_THROW(failing.write(path), Error);
    EXPECT_EQ(GGUFFile(path).tensor("gen").ne, (std::vector<int64_t>{5, 3}));
}

// The shared vocabulary files come from llama.cpp: tokenizer arrays, no tensors, no padding at
// the end. Facts checked here were read with gguf-py's GGUFReader.
TEST(GGUFVocab, ReadsLlamaSpm) {
    const std::string path =
        std::string(SYSLM_VOCAB_DIR) + "/ggml-vocab-llama-spm.gguf";
    const GGUFFile f(path);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.metadata().size(), 22u);
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f.get_u32("llama.context_length"), 4096u);
    EXPECT_EQ(f.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
    EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
    EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_eos_token"));
    const auto tokens = f.get("tokenizer.ggml.tokens").as_strings();
    ASSERT_EQ(tokens.size(), 32000u);
    EXPECT_EQ(tokens[0], "<unk>");
    EXPECT_EQ(tokens[31999], "给");
    const auto scores = f.get("tokenizer.ggml.scores").as_f32s();
    EXPECT_EQ(scores[31999], -31740.f);
    const auto types = f.get("tokenizer.ggml.token_type").as_i32s();
    EXPECT_EQ(types[0], 2);
    EXPECT_EQ(types[31999], 1);
}

TEST(GGUFVocab, ReadsGpt2) {
    const std::string path = std::string(SYSLM_VOCAB_DIR) + "/ggml-vocab-gpt-2.gguf";
    const GGUFFile f(path);
    EXPECT_EQ(f.metadata().size(), 16u);
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
    const auto tokens = f.get("tokenizer.ggml.tokens").as_strings();
    ASSERT_EQ(tokens.size(), 50257u);
    EXPECT_EQ(tokens[0], "!");
    EXPECT_EQ(tokens[50256], "<|endoftext|>");
    const auto merges = f.get("tokenizer.ggml.merges").as_strings();
    ASSERT_EQ(merges.size(), 50000u);
    EXPECT_EQ(merges[0], "Ġ t");
    EXPECT_EQ(merges[49999], "Ġg azed");
    EXPECT_EQ(f.get_u32("tokenizer.ggml.eos_token_id"), 50256u);
}

// Re-writing a file read from llama.cpp's writer reproduces it byte for byte (plus the padding
// our writer adds at the end): both sides agree on every field's encoding.
TEST(GGUFVocab, RewriteIsByteIdentical) {
    for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
        const std::string path = std::string(SYSLM_VOCAB_DIR) + "/" + name;
        const GGUFFile f(path);
        GGUFWriter w;
        for (const auto& [k, v] : f.metadata()) w.set(k, v);
        const std::string out = tmp_path(std::string("rewrite_") + name);
        w.write(out);
        auto original = read_all(path);
        while (original.size() % 32) original.push_back(0);
        EXPECT_EQ(read_all(out), original) << name;
    }
}

}  // namespace
}  // namespace syslm::io
