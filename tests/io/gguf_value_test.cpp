// GGUFValue conversions: numeric accessors convert only when the value fits, and every refusal is
// an Error that says what was expected and what was found.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.hpp"
#include "io/gguf.hpp"
#include "test_util.hpp"

namespace syslm::io {
namespace {

using test::error_of;

TEST(GGUFValue, IntegerConversionsCheckRange) {
    EXPECT_EQ(GGUFValue::u8(200).as_u32(), 200u);
    EXPECT_EQ(GGUFValue::i8(-7).as_i32(), -7);
    EXPECT_EQ(GGUFValue::i16(-300).as_i64(), -300);
    EXPECT_EQ(GGUFValue::u16(65535).as_i32(), 65535);
    EXPECT_EQ(GGUFValue::i64(123456789012345).as_u64(), 123456789012345u);
    EXPECT_EQ(GGUFValue::u64(4294967295u).as_u32(), 4294967295u);
    EXPECT_EQ(GGUFValue::i32(2147483647).as_u32(), 2147483647u);
    EXPECT_EQ(GGUFValue::boolean(true).as_u64(), 1u);

    EXPECT_THROW(GGUFValue::i32(-1).as_u32(), Error);
    EXPECT_THROW(GGUFValue::i8(-1).as_u64(), Error);
    EXPECT_THROW(GGUFValue::u64(4294967296u).as_u32(), Error);
    EXPECT_THROW(GGUFValue::u32(2147483648u).as_i32(), Error);
    EXPECT_THROW(GGUFValue::i64(-2147483649LL).as_i32(), Error);
    EXPECT_THROW(GGUFValue::u64(std::numeric_limits<uint64_t>::max()).as_i64(), Error);
    EXPECT_THROW(GGUFValue::f32(1.0f).as_u32(), Error);
    EXPECT_THROW(GGUFValue::string("7").as_i32(), Error);

    const std::string msg = error_of([] { GGUFValue::i32(-5).as_u32(); });
    EXPECT_NE(msg.find("unsigned 32-bit"), std::string::npos) << msg;
    EXPECT_NE(msg.find("i32 value -5"), std::string::npos) << msg;
}

TEST(GGUFValue, FloatsStringsBoolsAndArrays) {
    EXPECT_EQ(GGUFValue::f32(0.1f).as_f32(), 0.1f);
    EXPECT_EQ(GGUFValue::f64(0.1).as_f64(), 0.1);
    EXPECT_EQ(GGUFValue::i32(-3).as_f64(), -3.0);
    EXPECT_EQ(GGUFValue::u64(1ull << 40).as_f32(), 1099511627776.0f);
    EXPECT_THROW(GGUFValue::boolean(true).as_f64(), Error);
    EXPECT_THROW(GGUFValue::u8(1).as_bool(), Error);
    EXPECT_TRUE(GGUFValue::boolean(true).as_bool());
    EXPECT_FALSE(GGUFValue::boolean(false).as_bool());
    EXPECT_EQ(GGUFValue::string("héllo").as_string(), "héllo");
    EXPECT_NE(error_of([] { GGUFValue::u32(3).as_string(); }).find("expected a string, found u32"),
              std::string::npos);

    const auto strs = GGUFValue::strings({"a", "", "ccc"});
    EXPECT_TRUE(strs.is_array());
    EXPECT_EQ(strs.array_type(), GGUFType::STRING);
    EXPECT_EQ(strs.size(), 3u);
    EXPECT_EQ(strs.as_strings(), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_THROW(strs.as_f32s(), Error);
    EXPECT_THROW(strs.as_string(), Error);

    const std::vector<int32_t> ints = {-5, 0, 2147483647};
    const auto i32s = GGUFValue::i32s(ints);
    EXPECT_EQ(i32s.as_i32s(), ints);
    EXPECT_EQ(i32s.as_f32s(), (std::vector<float>{-5.f, 0.f, 2147483647.f}));
    const std::vector<uint32_t> big = {1, 4000000000u};
    EXPECT_NE(error_of([&] { GGUFValue::u32s(big).as_i32s(); }).find("array element 1"),
              std::string::npos);
    EXPECT_THROW(GGUFValue::f32s(std::vector<float>{1.f}).as_i32s(), Error);

    // Arrays hold one element type; mixing is refused.
    EXPECT_THROW(GGUFValue::array(GGUFType::U8, {GGUFValue::u8(1), GGUFValue::i8(1)}), Error);
    EXPECT_THROW(GGUFValue::array(static_cast<GGUFType>(13), {}), Error);
    const auto nested = GGUFValue::array(GGUFType::ARRAY, {strs, i32s});
    EXPECT_EQ(nested.item(1).item(2).as_i32(), 2147483647);
}

// An F32 element rebuilt from its items re-encodes to the file's bytes, NaN payloads included: a
// signalling NaN widened to double and back would come out quiet (the fuzzer found this).
TEST(GGUFValue, F32BitsSurviveARebuild) {
    const uint32_t patterns[] = {0x7f800001u /* signalling NaN */, 0xffa5a5a5u, 0x7fc00000u,
                                 0x80000000u /* -0 */, 0x00000001u /* denormal */};
    std::vector<float> values;
    for (uint32_t bits : patterns) {
        float f;
        std::memcpy(&f, &bits, 4);
        values.push_back(f);
    }
    const GGUFValue file = GGUFValue::f32s(values);
    std::vector<GGUFValue> items;
    file.for_each_item([&](size_t, const GGUFValue& v) { items.push_back(v); });
    const GGUFValue copy = GGUFValue::array(GGUFType::F32, items);
    const auto a = file.array_bytes(), b = copy.array_bytes();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
    for (size_t i = 0; i < items.size(); ++i) {
        const float f = items[i].as_f32();
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        EXPECT_EQ(bits, patterns[i]) << i;
    }
}

TEST(GGUFValue, DisplayIsShortAndOneLine) {
    EXPECT_EQ(GGUFValue::f32(1e-5f).to_display(), "1e-05");
    EXPECT_EQ(GGUFValue::f32(0.1f).to_display(), "0.1");
    EXPECT_EQ(GGUFValue::f64(-2.5).to_display(), "-2.5");
    EXPECT_EQ(GGUFValue::i8(-128).to_display(), "-128");
    EXPECT_EQ(GGUFValue::u64(18446744073709551615ull).to_display(), "18446744073709551615");
    EXPECT_EQ(GGUFValue::boolean(true).to_display(), "true");
    EXPECT_EQ(GGUFValue::string("a\"b\n\x01").to_display(), "\"a\\\"b\\n\\x01\"");
    std::vector<int32_t> v(100);
    for (int i = 0; i < 100; ++i) v[i] = i * 3 - 7;
    EXPECT_EQ(GGUFValue::i32s(v).to_display(3), "[-7, -4, -1, ... 97 more]");
    EXPECT_EQ(GGUFValue::i32s(std::span(v).first(2)).to_display(3), "[-7, -4]");
    EXPECT_EQ(GGUFValue::i32s({}).to_display(), "[]");
    const std::string long_str(500, 'x');
    const std::string shown = GGUFValue::string(long_str).to_display();
    EXPECT_LT(shown.size(), 200u);
    EXPECT_NE(shown.find("(500 bytes)"), std::string::npos);
    const auto nested =
        GGUFValue::array(GGUFType::ARRAY, {GGUFValue::strings({"x", "y"}), GGUFValue::strings({})});
    EXPECT_EQ(nested.to_display(), "[[\"x\", \"y\"], []]");
    EXPECT_EQ(gguf_type_name(GGUFType::F64), "f64");
    EXPECT_EQ(gguf_type_name(static_cast<GGUFType>(99)), "?");
}

}  // namespace
}  // namespace syslm::io
