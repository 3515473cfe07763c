// Helper for tests/reference/test_gguf_interop.py: copies a GGUF file through syslm's reader and
// writer ($SYSLM_GGUF_COPY_IN -> $SYSLM_GGUF_COPY_OUT) so that llama.cpp's gguf-py can check what
// syslm writes. Without those variables it copies a file of its own and checks the copy.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "io/gguf.hpp"

namespace syslm::io {
namespace {

void copy_gguf(const std::string& in, const std::string& out) {
    const GGUFFile f(in);
    GGUFWriter w;
    for (const auto& [k, v] : f.metadata()) w.set(k, v);
    // Tensor data is passed by pointer into the source map, which outlives write().
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    w.write(out);
}

TEST(GGUFInterop, CopyThroughReaderAndWriter) {
    const char* in = std::getenv("SYSLM_GGUF_COPY_IN");
    const char* out = std::getenv("SYSLM_GGUF_COPY_OUT");
    if (in && out) {
        copy_gguf(in, out);
        return;
    }
    // Self-check: a copy of a copy has the same bytes as the first copy.
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    const std::string a = std::string(SYSLM_TEST_TMP) + "/interop_a.gguf";
    const std::string b = std::string(SYSLM_TEST_TMP) + "/interop_b.gguf";
    const std::string c = std::string(SYSLM_TEST_TMP) + "/interop_c.gguf";
    GGUFWriter w;
    w.set("general.alignment", GGUFValue::u32(64));
    w.set("general.architecture", GGUFValue::string("llama"));
    w.set("x", GGUFValue::array(GGUFType::ARRAY, {GGUFValue::strings({"p", "q"})}));
    std::mt19937 rng(5);
    std::vector<uint8_t> q(34 * 3), g(4 * 5);
    for (auto& x : q) x = static_cast<uint8_t>(rng());
    for (auto& x : g) x = static_cast<uint8_t>(rng());
    w.add_tensor("q", DType::Q8_0, {32, 3}, q);
    w.add_tensor("g", DType::F32, {5}, g);
    w.write(a);
    copy_gguf(a, b);
    copy_gguf(b, c);
    const GGUFFile fa(a), fc(c);
    ASSERT_EQ(fa.file_size(), fc.file_size());
    const auto& ta = fa.tensors()[0];
    const auto& tc = fc.tensors()[0];
    // Same layout, and the bytes of the whole file agree.
    const uint8_t* sa = ta.data - fa.data_offset() - ta.offset;
    const uint8_t* sc = tc.data - fc.data_offset() - tc.offset;
    EXPECT_EQ(std::memcmp(sa, sc, fa.file_size()), 0);
    EXPECT_EQ(fc.alignment(), 64u);
}

}  // namespace
}  // namespace syslm::io
