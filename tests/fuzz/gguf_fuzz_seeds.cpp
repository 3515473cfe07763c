// Writes the seed corpus for gguf_fuzz: small valid GGUF files covering every value type, nested
// arrays, tensors of several types, a custom alignment, and shortened copies of real vocabulary
// files (the full ones are megabytes, which would slow every fuzzing iteration).
//
// usage: gguf_fuzz_seeds OUT_DIR [VOCAB.gguf ...]
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "io/gguf.hpp"

namespace {

using namespace syslm;
using namespace syslm::io;

std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
}

void add_tensor(GGUFWriter& w, std::mt19937& rng, const std::string& name, DType t,
                std::vector<int64_t> ne) {
    int64_t rows = 1;
    for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
    w.add_tensor(name, t, ne, random_bytes(rng, row_bytes(t, ne[0]) * static_cast<size_t>(rows)));
}

// Keeps every key; arrays are cut to their first `keep` elements.
GGUFValue shorten(const GGUFValue& v, size_t keep) {
    if (!v.is_array() || v.size() <= keep) return v;
    std::vector<GGUFValue> items;
    v.for_each_item([&](size_t, const GGUFValue& item) { items.push_back(item); }, keep);
    return GGUFValue::array(v.array_type(), items);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR [VOCAB.gguf ...]\n", argv[0]);
        return 2;
    }
    try {
        const std::string out = argv[1];
        std::filesystem::create_directories(out);
        std::mt19937 rng(42);

        GGUFWriter empty;
        empty.write(out + "/empty.gguf");

        GGUFWriter values;
        values.set("general.architecture", GGUFValue::string("llama"));
        values.set("u8", GGUFValue::u8(200));
        values.set("i8", GGUFValue::i8(-3));
        values.set("u16", GGUFValue::u16(60000));
        values.set("i16", GGUFValue::i16(-30000));
        values.set("u32", GGUFValue::u32(4000000000u));
        values.set("i32", GGUFValue::i32(-2000000000));
        values.set("u64", GGUFValue::u64(1ull << 60));
        values.set("i64", GGUFValue::i64(-(1ll << 60)));
        values.set("f32", GGUFValue::f32(0.1f));
        values.set("f64", GGUFValue::f64(-1e300));
        values.set("bool", GGUFValue::boolean(true));
        values.set("str", GGUFValue::string("h\xc3\xa9llo \xff"));
        values.set("strs", GGUFValue::strings({"a", "", "bc"}));
        // A signalling NaN: its bits must survive a rebuild (found by the fuzzer).
        values.set("f32s", GGUFValue::f32s(std::vector<float>{
                               1.5f, -2.f, 1e-8f, std::numeric_limits<float>::signaling_NaN()}));
        values.set("i32s", GGUFValue::i32s(std::vector<int32_t>{-1, 0, 7}));
        values.set("u32s", GGUFValue::u32s(std::vector<uint32_t>{3, 4000000000u}));
        values.set("bools", GGUFValue::array(GGUFType::BOOL, {GGUFValue::boolean(false),
                                                              GGUFValue::boolean(true)}));
        values.set("nested", GGUFValue::array(GGUFType::ARRAY,
                                              {GGUFValue::strings({"x"}), GGUFValue::i32s({})}));
        // Long arrays of strings and of arrays: past GGUFValue::kIndexStride, item(i) goes through
        // the sparse index.
        std::vector<std::string> many;
        for (int i = 0; i < 150; ++i)
            many.push_back(
                std::string(static_cast<size_t>(i % 7), static_cast<char>('a' + i % 26)));
        values.set("strs.long", GGUFValue::strings(many));
        std::vector<GGUFValue> arrays;
        for (int i = 0; i < 70; ++i)
            arrays.push_back(
                GGUFValue::strings(std::vector<std::string>(static_cast<size_t>(i % 3), "z")));
        values.set("nested.long", GGUFValue::array(GGUFType::ARRAY, arrays));
        values.write(out + "/values.gguf");

        GGUFWriter tensors;
        tensors.set("general.architecture", GGUFValue::string("llama"));
        add_tensor(tensors, rng, "token_embd.weight", DType::F32, {5, 3});
        add_tensor(tensors, rng, "blk.0.attn_q.weight", DType::F16, {4, 2, 2});
        add_tensor(tensors, rng, "blk.0.ffn_up.weight", DType::Q8_0, {32, 2});
        add_tensor(tensors, rng, "blk.0.ffn_down.weight", DType::Q4_0, {64});
        add_tensor(tensors, rng, "blk.0.attn_norm.weight", DType::BF16, {3, 1, 1, 2});
        add_tensor(tensors, rng, "output.weight", DType::Q4_K, {256});
        tensors.write(out + "/tensors.gguf");

        GGUFWriter aligned;
        aligned.set("general.alignment", GGUFValue::u32(64));
        add_tensor(aligned, rng, "a", DType::I32, {7});
        add_tensor(aligned, rng, "b", DType::Q6_K, {256, 1});
        aligned.write(out + "/align64.gguf");

        for (int i = 2; i < argc; ++i) {
            const GGUFFile vocab(argv[i]);
            GGUFWriter mini;
            for (const auto& [k, v] : vocab.metadata()) mini.set(k, shorten(v, 48));
            mini.write(out + "/mini-" + std::filesystem::path(argv[i]).filename().string());
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gguf_fuzz_seeds: %s\n", e.what());
        return 1;
    }
    return 0;
}
