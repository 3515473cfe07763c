// GGUFValue: one metadata value of a GGUF file (scalar, string or array), with checked
// conversions between numeric types and a short display form for `syslm info`.
#include <charconv>
#include <cstdio>
#include <limits>

#include "core/error.hpp"
#include "io/gguf.hpp"

namespace syslm::io {

std::string_view gguf_type_name(GGUFType t) {
    switch (t) {
        case GGUFType::U8:
            return "u8";
        case GGUFType::I8:
            return "i8";
        case GGUFType::U16:
            return "u16";
        case GGUFType::I16:
            return "i16";
        case GGUFType::U32:
            return "u32";
        case GGUFType::I32:
            return "i32";
        case GGUFType::F32:
            return "f32";
        case GGUFType::BOOL:
            return "bool";
        case GGUFType::STRING:
            return "string";
        case GGUFType::ARRAY:
            return "array";
        case GGUFType::U64:
            return "u64";
        case GGUFType::I64:
            return "i64";
        case GGUFType::F64:
            return "f64";
    }
    return "?";
}

bool gguf_type_valid(uint32_t id) {
    return id <= static_cast<uint32_t>(GGUFType::F64);
}

size_t gguf_scalar_size(GGUFType t) {
    switch (t) {
        case GGUFType::U8:
        case GGUFType::I8:
        case GGUFType::BOOL:
            return 1;
        case GGUFType::U16:
        case GGUFType::I16:
            return 2;
        case GGUFType::U32:
        case GGUFType::I32:
        case GGUFType::F32:
            return 4;
        case GGUFType::U64:
        case GGUFType::I64:
        case GGUFType::F64:
            return 8;
        case GGUFType::STRING:
        case GGUFType::ARRAY:
            return 0;
    }
    return 0;
}

namespace {

bool is_unsigned(GGUFType t) {
    return t == GGUFType::U8 || t == GGUFType::U16 || t == GGUFType::U32 || t == GGUFType::U64;
}
bool is_signed(GGUFType t) {
    return t == GGUFType::I8 || t == GGUFType::I16 || t == GGUFType::I32 || t == GGUFType::I64;
}
bool is_float(GGUFType t) {
    return t == GGUFType::F32 || t == GGUFType::F64;
}

std::string format_double(double v, bool single) {
    char buf[64];
    const auto r = single ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v))
                          : std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

// Strings are bytes (the spec asks for UTF-8 but files in the wild break it): control bytes are
// escaped so a display line stays one line; everything else is shown as is.
std::string quote(const std::string& s, size_t max_bytes) {
    std::string out = "\"";
    const size_t n = std::min(s.size(), max_bytes);
    for (size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\r':
                out += "\\r";
                break;
            default:
                if (c < 0x20 || c == 0x7f) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\x%02x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    out += '"';
    if (n < s.size()) out += cat("... (", s.size(), " bytes)");
    return out;
}

}  // namespace

GGUFValue GGUFValue::u8(uint8_t v) {
    GGUFValue r;
    r.type_ = GGUFType::U8;
    r.u_ = v;
    return r;
}
GGUFValue GGUFValue::u16(uint16_t v) {
    GGUFValue r;
    r.type_ = GGUFType::U16;
    r.u_ = v;
    return r;
}
GGUFValue GGUFValue::u32(uint32_t v) {
    GGUFValue r;
    r.type_ = GGUFType::U32;
    r.u_ = v;
    return r;
}
GGUFValue GGUFValue::u64(uint64_t v) {
    GGUFValue r;
    r.type_ = GGUFType::U64;
    r.u_ = v;
    return r;
}
GGUFValue GGUFValue::i8(int8_t v) {
    GGUFValue r;
    r.type_ = GGUFType::I8;
    r.i_ = v;
    return r;
}
GGUFValue GGUFValue::i16(int16_t v) {
    GGUFValue r;
    r.type_ = GGUFType::I16;
    r.i_ = v;
    return r;
}
GGUFValue GGUFValue::i32(int32_t v) {
    GGUFValue r;
    r.type_ = GGUFType::I32;
    r.i_ = v;
    return r;
}
GGUFValue GGUFValue::i64(int64_t v) {
    GGUFValue r;
    r.type_ = GGUFType::I64;
    r.i_ = v;
    return r;
}
GGUFValue GGUFValue::f32(float v) {
    GGUFValue r;
    r.type_ = GGUFType::F32;
    r.f_ = v;
    return r;
}
GGUFValue GGUFValue::f64(double v) {
    GGUFValue r;
    r.type_ = GGUFType::F64;
    r.f_ = v;
    return r;
}
GGUFValue GGUFValue::boolean(bool v) {
    GGUFValue r;
    r.type_ = GGUFType::BOOL;
    r.u_ = v ? 1 : 0;
    return r;
}
GGUFValue GGUFValue::string(std::string v) {
    GGUFValue r;
    r.type_ = GGUFType::STRING;
    r.s_ = std::move(v);
    return r;
}

GGUFValue GGUFValue::array(GGUFType elem, std::vector<GGUFValue> items) {
    SYSLM_CHECK(gguf_type_valid(static_cast<uint32_t>(elem)), "invalid array element type ",
                static_cast<uint32_t>(elem));
    for (size_t i = 0; i < items.size(); ++i)
        SYSLM_CHECK(items[i].type() == elem, "array of ", gguf_type_name(elem), ": element ", i,
                    " is a ", gguf_type_name(items[i].type()));
    GGUFValue r;
    r.type_ = GGUFType::ARRAY;
    r.array_type_ = elem;
    r.items_ = std::move(items);
    return r;
}

GGUFValue GGUFValue::strings(std::vector<std::string> v) {
    std::vector<GGUFValue> items;
    items.reserve(v.size());
    for (auto& s : v) items.push_back(string(std::move(s)));
    return array(GGUFType::STRING, std::move(items));
}

GGUFValue GGUFValue::f32s(std::span<const float> v) {
    std::vector<GGUFValue> items;
    items.reserve(v.size());
    for (float x : v) items.push_back(f32(x));
    return array(GGUFType::F32, std::move(items));
}

GGUFValue GGUFValue::i32s(std::span<const int32_t> v) {
    std::vector<GGUFValue> items;
    items.reserve(v.size());
    for (int32_t x : v) items.push_back(i32(x));
    return array(GGUFType::I32, std::move(items));
}

GGUFValue GGUFValue::u32s(std::span<const uint32_t> v) {
    std::vector<GGUFValue> items;
    items.reserve(v.size());
    for (uint32_t x : v) items.push_back(u32(x));
    return array(GGUFType::U32, std::move(items));
}

namespace {

// "i32 value -5", "string", "array of u8": what a failed conversion found.
std::string describe(const GGUFValue& v) {
    if (v.is_array()) return cat("array of ", gguf_type_name(v.array_type()));
    if (v.type() == GGUFType::STRING) return "string";
    return cat(gguf_type_name(v.type()), " value ", v.to_display());
}

}  // namespace

uint64_t GGUFValue::as_u64() const {
    if (is_unsigned(type_) || type_ == GGUFType::BOOL) return u_;
    if (is_signed(type_) && i_ >= 0) return static_cast<uint64_t>(i_);
    fail("expected a non-negative integer, found ", describe(*this));
}

int64_t GGUFValue::as_i64() const {
    if (is_signed(type_)) return i_;
    if ((is_unsigned(type_) || type_ == GGUFType::BOOL) &&
        u_ <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return static_cast<int64_t>(u_);
    fail("expected a 64-bit signed integer, found ", describe(*this));
}

uint32_t GGUFValue::as_u32() const {
    const bool ok = ((is_unsigned(type_) || type_ == GGUFType::BOOL) &&
                     u_ <= std::numeric_limits<uint32_t>::max()) ||
                    (is_signed(type_) && i_ >= 0 && i_ <= std::numeric_limits<uint32_t>::max());
    if (!ok) fail("expected an unsigned 32-bit integer, found ", describe(*this));
    return static_cast<uint32_t>(is_signed(type_) ? static_cast<uint64_t>(i_) : u_);
}

int32_t GGUFValue::as_i32() const {
    const bool ok = ((is_unsigned(type_) || type_ == GGUFType::BOOL) &&
                     u_ <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) ||
                    (is_signed(type_) && i_ >= std::numeric_limits<int32_t>::min() &&
                     i_ <= std::numeric_limits<int32_t>::max());
    if (!ok) fail("expected a signed 32-bit integer, found ", describe(*this));
    return static_cast<int32_t>(is_signed(type_) ? i_ : static_cast<int64_t>(u_));
}

double GGUFValue::as_f64() const {
    if (is_float(type_)) return f_;
    if (is_unsigned(type_)) return static_cast<double>(u_);
    if (is_signed(type_)) return static_cast<double>(i_);
    fail("expected a number, found ", describe(*this));
}

bool GGUFValue::as_bool() const {
    if (type_ != GGUFType::BOOL) fail("expected a bool, found ", describe(*this));
    return u_ != 0;
}

const std::string& GGUFValue::as_string() const {
    if (type_ != GGUFType::STRING) fail("expected a string, found ", describe(*this));
    return s_;
}

const std::vector<GGUFValue>& GGUFValue::items() const {
    if (type_ != GGUFType::ARRAY) fail("expected an array, found ", describe(*this));
    return items_;
}

std::vector<std::string> GGUFValue::as_strings() const {
    if (type_ != GGUFType::ARRAY || array_type_ != GGUFType::STRING)
        fail("expected an array of strings, found ", describe(*this));
    std::vector<std::string> out;
    out.reserve(items_.size());
    for (const auto& v : items_) out.push_back(v.s_);
    return out;
}

std::vector<float> GGUFValue::as_f32s() const {
    if (type_ != GGUFType::ARRAY ||
        !(is_float(array_type_) || is_signed(array_type_) || is_unsigned(array_type_)))
        fail("expected an array of numbers, found ", describe(*this));
    std::vector<float> out;
    out.reserve(items_.size());
    for (const auto& v : items_) out.push_back(v.as_f32());
    return out;
}

std::vector<int32_t> GGUFValue::as_i32s() const {
    if (type_ != GGUFType::ARRAY || !(is_signed(array_type_) || is_unsigned(array_type_)))
        fail("expected an array of integers, found ", describe(*this));
    std::vector<int32_t> out;
    out.reserve(items_.size());
    for (size_t i = 0; i < items_.size(); ++i) {
        try {
            out.push_back(items_[i].as_i32());
        } catch (const Error& e) {
            fail("array element ", i, ": ", e.what());
        }
    }
    return out;
}

std::string GGUFValue::to_display(size_t max_items) const {
    switch (type_) {
        case GGUFType::U8:
        case GGUFType::U16:
        case GGUFType::U32:
        case GGUFType::U64:
            return std::to_string(u_);
        case GGUFType::I8:
        case GGUFType::I16:
        case GGUFType::I32:
        case GGUFType::I64:
            return std::to_string(i_);
        case GGUFType::F32:
            return format_double(f_, true);
        case GGUFType::F64:
            return format_double(f_, false);
        case GGUFType::BOOL:
            return u_ ? "true" : "false";
        case GGUFType::STRING:
            return quote(s_, 120);
        case GGUFType::ARRAY: {
            // max_items == 0 shows every element.
            const size_t shown =
                max_items == 0 ? items_.size() : std::min(max_items, items_.size());
            std::string out = "[";
            for (size_t i = 0; i < shown; ++i) {
                if (i) out += ", ";
                // Long strings inside arrays (merges, chat templates) are cut shorter.
                out += items_[i].type_ == GGUFType::STRING ? quote(items_[i].s_, 40)
                                                           : items_[i].to_display(max_items);
            }
            if (shown < items_.size())
                out += cat(shown ? ", " : "", "... ", items_.size() - shown, " more");
            out += "]";
            return out;
        }
    }
    return "?";
}

}  // namespace syslm::io
