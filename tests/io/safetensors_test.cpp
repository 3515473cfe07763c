// Safetensors reader: files built byte by byte from the spec (u64 header length, JSON header,
// data), valid and malformed. Every malformed case must throw one syslm::Error that names the file
// and what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "io/safetensors.hpp"

namespace syslm::io {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data) {
    std::vector<uint8_t> out(8 + header.size() + data.size());
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
    std::copy(header.begin(), header.end(), out.begin() + 8);
    std::copy(data.begin(), data.end(),
              out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
    return out;
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

// Expects an Error whose message contains the file name and every fragment.
void expect_error(const std::vector<uint8_t>& file, std::initializer_list<std::string> fragments) {
    try {
        SafetensorsFile f(file, "bad.safetensors");
        FAIL() << "no error; expected: " << *fragments.begin();
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
        for (const auto& frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << msg;
    }
}

TEST(Safetensors, ReadsTensorsShapesAndMetadata) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    std::vector<float> a(3 * 37);
    for (auto& x : a) x = nd(rng);
    std::vector<uint16_t> b(5 * 11);  // F16 bits
    for (auto& x : b) x = f32_to_f16(nd(rng));
    std::vector<uint16_t> c(13);  // BF16 bits
    for (auto& x : c) x = f32_to_bf16(nd(rng));
    std::vector<double> d = {1.5, -2.25, 1e-3};
    std::vector<uint8_t> data = bytes_of(a);
    const size_t ob = data.size();
    auto bb = bytes_of(b);
    data.insert(data.end(), bb.begin(), bb.end());
    const size_t oc = data.size();
    auto cb = bytes_of(c);
    data.insert(data.end(), cb.begin(), cb.end());
    const size_t od = data.size();
    auto db = bytes_of(d);
    data.insert(data.end(), db.begin(), db.end());
    const std::string header =
        R"({"__metadata__":{"format":"pt","note":"x"},)"
        R"("w.b":{"dtype":"F16","shape":[5,11],"data_offsets":[)" +
        std::to_string(ob) + "," + std::to_string(oc) +
        R"(]},"w.a":{"dtype":"F32","shape":[3,37],"data_offsets":[0,)" + std::to_string(ob) +
        R"(]},"c":{"dtype":"BF16","shape":[13],"data_offsets":[)" + std::to_string(oc) + "," +
        std::to_string(od) + R"(]},"d":{"dtype":"F64","shape":[3],"data_offsets":[)" +
        std::to_string(od) + "," + std::to_string(data.size()) +
        R"(]},"empty":{"dtype":"I32","shape":[0,4],"data_offsets":[)" +
        std::to_string(data.size()) + "," + std::to_string(data.size()) + "]}}    ";
    const auto file = make_file(header, data);
    SafetensorsFile f(file, "ok.safetensors");
    ASSERT_EQ(f.tensors().size(), 5u);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    const STTensor* ta = f.find("w.a");
    ASSERT_TRUE(ta);
    EXPECT_EQ(ta->shape, (std::vector<int64_t>{3, 37}));
    EXPECT_EQ(ta->dtype, STDType::F32);
    EXPECT_EQ(st_to_f32(*ta), a);
    const auto fb = st_to_f32(*f.find("w.b"));
    for (size_t i = 0; i < b.size(); ++i)
        EXPECT_EQ(fb[i], static_cast<float>(std::bit_cast<_Float16>(b[i])));
    const auto fc = st_to_f32(*f.find("c"));
    for (size_t i = 0; i < c.size(); ++i) {
        const uint32_t bits = static_cast<uint32_t>(c[i]) << 16;
        EXPECT_EQ(std::bit_cast<uint32_t>(fc[i]), bits);
    }
    EXPECT_EQ(st_to_f32(*f.find("d")), (std::vector<float>{1.5f, -2.25f, 1e-3f}));
    EXPECT_EQ(f.find("empty")->numel(), 0);
    EXPECT_EQ(f.find("nope"), nullptr);
    try {
        st_to_f32(*f.find("empty"));
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'empty' has dtype I32"), std::string::npos)
            << e.what();
    }
}

const std::string kOneTensor = R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
const std::vector<uint8_t> kData(24, 0x3f);

TEST(SafetensorsMalformed, TooShort) {
    expect_error({1, 2, 3}, {"shorter than the 8-byte header length"});
}

TEST(SafetensorsMalformed, HeaderLengthPastEnd) {
    auto f = make_file(kOneTensor, kData);
    f[0] = 0xff, f[1] = 0xff, f[3] = 0x01;
    expect_error(f, {"header length", "runs past the end of the file"});
    auto g = make_file(kOneTensor, kData);
    for (int i = 0; i < 8; ++i) g[i] = 0xff;  // 2^64 - 1: must not overflow
    expect_error(g, {"runs past the end"});
}

TEST(SafetensorsMalformed, BadJson) {
    expect_error(make_file(R"({"t": {"dtype": "F32", )", kData), {"not valid JSON"});
    expect_error(make_file(R"([1, 2, 3])", kData), {"must be a JSON object"});
    expect_error(make_file("\x01\x02", {}), {"not valid JSON"});
}

TEST(SafetensorsMalformed, BadEntries) {
    expect_error(make_file(R"({"t": 5})", kData), {"tensor 't'", "entry must be an object"});
    expect_error(make_file(R"({"t":{"shape":[2,3],"data_offsets":[0,24]}})", kData),
                 {"tensor 't'", "dtype"});
    expect_error(make_file(R"({"t":{"dtype":"F128","shape":[2,3],"data_offsets":[0,24]}})", kData),
                 {"tensor 't'", "unknown dtype 'F128'"});
    expect_error(make_file(R"({"t":{"dtype":"F32","shape":"2x3","data_offsets":[0,24]}})", kData),
                 {"tensor 't'", "shape"});
    expect_error(make_file(R"({"t":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}})", kData),
                 {"tensor 't'", "shape entry must be a non-negative integer"});
    expect_error(make_file(R"({"t":{"dtype":"F32","shape":[2,3.5],"data_offsets":[0,24]}})", kData),
                 {"shape entry"});
    expect_error(make_file(R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[0]}})", kData),
                 {"tensor 't'", "data_offsets"});
    expect_error(make_file(R"({"__metadata__":{"a":1}})", kData), {"__metadata__"});
}

TEST(SafetensorsMalformed, OffsetsBeyondFile) {
    expect_error(make_file(R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[4,28]}})", kData),
                 {"tensor 't'", "beyond the data section of 24 bytes"});
    expect_error(make_file(R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[24,0]}})", kData),
                 {"tensor 't'", "reversed"});
    expect_error(
        make_file(R"({"t":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,24]}})",
                  kData),
        {"tensor 't'", "overflows"});
}

TEST(SafetensorsMalformed, SizeMismatch) {
    expect_error(make_file(R"({"t":{"dtype":"F16","shape":[2,3],"data_offsets":[0,24]}})", kData),
                 {"tensor 't'", "hold 24 bytes but F16 [2, 3] needs 12"});
}

TEST(SafetensorsMalformed, Overlap) {
    const std::string h = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"F32","shape":[3],"data_offsets":[12,24]}})";
    expect_error(make_file(h, kData), {"'a'", "'b'", "overlap"});
}

TEST(SafetensorsMalformed, DuplicateName) {
    const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
    expect_error(make_file(h, kData), {"duplicate tensor name 'a'"});
}

// Random byte flips of a valid file: either parses or throws Error, never crashes.
TEST(SafetensorsMalformed, RandomCorruptionNeverCrashes) {
    const auto good = make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"BF16","shape":[3,2],"data_offsets":[8,20]}})",
                                kData);
    std::mt19937 rng(3);
    for (int iter = 0; iter < 3000; ++iter) {
        auto f = good;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) f[rng() % f.size()] = static_cast<uint8_t>(rng());
        if (rng() % 5 == 0) f.resize(rng() % f.size());
        try {
            SafetensorsFile sf(f, "fuzz.safetensors");
            for (const auto& t : sf.tensors()) {
                ASSERT_LE(t.data.data() + t.data.size(), f.data() + f.size());
                ASSERT_GE(t.data.data(), f.data());
            }
        } catch (const Error&) {
        }
    }
}

// ---- folders: single file, index + shards ----

class SafetensorsDir : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ =
            fs::path(SYSLM_TEST_TMP) /
            ("st_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void write(const std::string& name, const std::vector<uint8_t>& bytes) {
        std::ofstream(dir_ / name, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes.data()),
                   static_cast<std::streamsize>(bytes.size()));
    }
    void write_text(const std::string& name, const std::string& text) {
        std::ofstream(dir_ / name) << text;
    }
    std::string error_of() {
        try {
            SafetensorsModel m(dir_.string());
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }
    fs::path dir_;
};

std::vector<uint8_t> shard(const std::string& name, float value) {
    std::vector<float> v(6, value);
    return make_file(R"({")" + name + R"(":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
                     bytes_of(v));
}

TEST_F(SafetensorsDir, IndexedShards) {
    write("model-00001-of-00002.safetensors", shard("x", 1.0f));
    write("model-00002-of-00002.safetensors", shard("y", 2.0f));
    write_text("model.safetensors.index.json",
               R"({"metadata":{},"weight_map":{"x":"model-00001-of-00002.safetensors",)"
               R"("y":"model-00002-of-00002.safetensors"}})");
    SafetensorsModel m(dir_.string());
    EXPECT_EQ(m.names(), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(st_to_f32(m.tensor("y"))[5], 2.0f);
    EXPECT_EQ(m.files().size(), 2u);
    EXPECT_THROW(m.tensor("z"), Error);
}

TEST_F(SafetensorsDir, IndexListsMissingTensor) {
    write("a.safetensors", shard("x", 1.0f));
    write_text("model.safetensors.index.json",
               R"({"weight_map":{"x":"a.safetensors","w":"a.safetensors"}})");
    const std::string e = error_of();
    EXPECT_NE(e.find("tensor 'w' listed in model.safetensors.index.json is missing"),
              std::string::npos)
        << e;
}

TEST_F(SafetensorsDir, ShardHasUnlistedTensor) {
    write("a.safetensors", shard("x", 1.0f));
    write("b.safetensors", shard("y", 1.0f));
    write_text("model.safetensors.index.json",
               R"({"weight_map":{"x":"a.safetensors","q":"b.safetensors"}})");
    const std::string e = error_of();
    EXPECT_NE(e.find("b.safetensors: tensor 'y' is not listed"), std::string::npos) << e;
}

TEST_F(SafetensorsDir, MissingShardFile) {
    write("a.safetensors", shard("x", 1.0f));
    write_text("model.safetensors.index.json",
               R"({"weight_map":{"x":"a.safetensors","y":"gone.safetensors"}})");
    const std::string e = error_of();
    EXPECT_NE(e.find("shard 'gone.safetensors' listed in weight_map is missing"), std::string::npos)
        << e;
}

TEST_F(SafetensorsDir, BadIndex) {
    write_text("model.safetensors.index.json", R"({"weight_map": [1]})");
    EXPECT_NE(error_of().find("weight_map"), std::string::npos);
    write_text("model.safetensors.index.json", R"({"weight_map": {"x": "../x.safetensors"}})");
    EXPECT_NE(error_of().find("plain file name"), std::string::npos);
    write_text("model.safetensors.index.json", "{not json");
    EXPECT_NE(error_of().find("not valid JSON"), std::string::npos);
}

TEST_F(SafetensorsDir, DuplicateAcrossShardsWithoutIndex) {
    write("model-1.safetensors", shard("x", 1.0f));
    write("model-2.safetensors", shard("x", 2.0f));
    const std::string e = error_of();
    EXPECT_NE(e.find("tensor 'x' appears in both"), std::string::npos) << e;
}

TEST_F(SafetensorsDir, NoWeights) {
    write_text("config.json", "{}");
    const std::string e = error_of();
    EXPECT_NE(e.find("no model.safetensors"), std::string::npos) << e;
}

TEST_F(SafetensorsDir, CorruptShardNamesFile) {
    auto bad = shard("x", 1.0f);
    bad.resize(bad.size() - 4);
    write("model.safetensors", bad);
    const std::string e = error_of();
    EXPECT_NE(e.find("model.safetensors: tensor 'x'"), std::string::npos) << e;
    EXPECT_NE(e.find("beyond the data section"), std::string::npos) << e;
}

}  // namespace
}  // namespace syslm::io
