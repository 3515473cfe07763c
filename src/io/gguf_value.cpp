// GGUFValue: one metadata value of a GGUF file (scalar, string or array), with checked
// conversions between numeric types and a short display form for `syslm info`. Strings and arrays
// are views of their GGUF encoding (see gguf.hpp): this file decodes elements from those bytes and
// encodes the values built in memory.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdio>
#include <cstring>
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
std::string quote(std::string_view s, size_t max_bytes) {
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

static_assert(std::endian::native == std::endian::little,
              "GGUF values are decoded by memcpy: little-endian hosts only");

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

template <class T>
void put(std::vector<uint8_t>& b, T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
}

// Decoding bytes that were validated (by the parser, or by our own encoder) cannot fail unless
// they changed since: a caller's buffer that was modified, or a mapped file rewritten in place.
// Every read is still bounds-checked so that this is an Error, never a read out of bounds.
[[noreturn]] void inconsistent(const char* what, size_t off) {
    fail("GGUF value: ", what, " at byte ", off,
         " of its encoding is out of bounds or invalid (were the bytes changed after they were "
         "validated?)");
}

void need(std::span<const uint8_t> b, size_t off, size_t n, const char* what) {
    if (off > b.size() || b.size() - off < n) inconsistent(what, off);
}

void skip(GGUFType t, std::span<const uint8_t> b, size_t& off, int level);

// Moves off past n elements of type t that are array elements at nesting level `level` (the
// array holding them is level - 1; a top-level array is level 1). With `index`, records the
// offset of every kIndexStride-th element.
void skip_elements(GGUFType t, uint64_t n, std::span<const uint8_t> b, size_t& off, int level,
                   std::vector<size_t>* index) {
    const size_t fixed = gguf_scalar_size(t);
    if (fixed) {
        if (off > b.size() || n > (b.size() - off) / fixed) inconsistent("array", off);
        off += static_cast<size_t>(n) * fixed;
        return;
    }
    for (uint64_t i = 0; i < n; ++i) {
        if (index && i % GGUFValue::kIndexStride == 0) index->push_back(off);
        skip(t, b, off, level);
    }
}

// Moves off past one encoded element of type t at nesting level `level`.
void skip(GGUFType t, std::span<const uint8_t> b, size_t& off, int level) {
    if (const size_t fixed = gguf_scalar_size(t)) {
        need(b, off, fixed, "value");
        off += fixed;
    } else if (t == GGUFType::STRING) {
        need(b, off, 8, "string length");
        const uint64_t len = load<uint64_t>(b.data() + off);
        if (len > b.size() - off - 8) inconsistent("string", off);
        off += 8 + static_cast<size_t>(len);
    } else {
        if (level > kGGUFMaxArrayDepth)
            fail("arrays nested deeper than ", kGGUFMaxArrayDepth, " levels");
        need(b, off, 12, "array header");
        const uint32_t elem = load<uint32_t>(b.data() + off);
        if (!gguf_type_valid(elem)) inconsistent("array element type", off);
        const uint64_t n = load<uint64_t>(b.data() + off + 4);
        off += 12;
        skip_elements(static_cast<GGUFType>(elem), n, b, off, level + 1, nullptr);
    }
}

}  // namespace

GGUFValue GGUFValue::decode(GGUFType t, std::span<const uint8_t> b, size_t& off,
                            const std::shared_ptr<const void>& owner) {
    if (const size_t fixed = gguf_scalar_size(t)) {
        need(b, off, fixed, "value");
        const uint8_t* p = b.data() + off;
        off += fixed;
        switch (t) {
            case GGUFType::U8:
                return u8(load<uint8_t>(p));
            case GGUFType::I8:
                return i8(load<int8_t>(p));
            case GGUFType::U16:
                return u16(load<uint16_t>(p));
            case GGUFType::I16:
                return i16(load<int16_t>(p));
            case GGUFType::U32:
                return u32(load<uint32_t>(p));
            case GGUFType::I32:
                return i32(load<int32_t>(p));
            case GGUFType::U64:
                return u64(load<uint64_t>(p));
            case GGUFType::I64:
                return i64(load<int64_t>(p));
            case GGUFType::F32:
                return f32(load<float>(p));
            case GGUFType::F64:
                return f64(load<double>(p));
            case GGUFType::BOOL:
                return boolean(*p != 0);
            default:
                break;
        }
    }
    if (t == GGUFType::STRING) {
        need(b, off, 8, "string length");
        const uint64_t len = load<uint64_t>(b.data() + off);
        if (len > b.size() - off - 8) inconsistent("string", off);
        GGUFValue r;
        r.type_ = GGUFType::STRING;
        r.bytes_ = b.subspan(off + 8, static_cast<size_t>(len));
        r.owner_ = owner;
        off += 8 + static_cast<size_t>(len);
        return r;
    }
    if (t == GGUFType::ARRAY) {
        need(b, off, 12, "array header");
        const uint32_t elem = load<uint32_t>(b.data() + off);
        if (!gguf_type_valid(elem)) inconsistent("array element type", off);
        const uint64_t n = load<uint64_t>(b.data() + off + 4);
        off += 12;
        return view_array(static_cast<GGUFType>(elem), n, b, off, owner);
    }
    inconsistent("value type", off);
}

GGUFValue GGUFValue::view_array(GGUFType elem, uint64_t count, std::span<const uint8_t> b,
                                size_t& off, const std::shared_ptr<const void>& owner) {
    const size_t start = off;
    const bool indexed = gguf_scalar_size(elem) == 0 && count > kIndexStride;
    std::vector<size_t> index;
    if (indexed) {
        // Every string or array takes at least 8 bytes: the index never needs more than this.
        const uint64_t fits = (b.size() - std::min(start, b.size())) / 8;
        index.reserve(static_cast<size_t>(std::min(count, fits) / kIndexStride + 1));
    }
    skip_elements(elem, count, b, off, 2, indexed ? &index : nullptr);
    GGUFValue r;
    r.type_ = GGUFType::ARRAY;
    r.array_type_ = elem;
    r.count_ = count;
    r.bytes_ = b.subspan(start, off - start);
    r.owner_ = owner;
    if (indexed) {
        for (size_t& x : index) x -= start;
        r.index_ = std::make_shared<const std::vector<size_t>>(std::move(index));
    }
    return r;
}

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
    r.g_ = v;
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
    auto owned = std::make_shared<const std::string>(std::move(v));
    GGUFValue r;
    r.type_ = GGUFType::STRING;
    r.bytes_ = {reinterpret_cast<const uint8_t*>(owned->data()), owned->size()};
    r.owner_ = std::move(owned);
    return r;
}

namespace {

// Appends v as an array element is encoded (no type tag).
void encode(std::vector<uint8_t>& b, const GGUFValue& v) {
    switch (v.type()) {
        case GGUFType::U8:
            put(b, static_cast<uint8_t>(v.as_u64()));
            break;
        case GGUFType::I8:
            put(b, static_cast<int8_t>(v.as_i64()));
            break;
        case GGUFType::U16:
            put(b, static_cast<uint16_t>(v.as_u64()));
            break;
        case GGUFType::I16:
            put(b, static_cast<int16_t>(v.as_i64()));
            break;
        case GGUFType::U32:
            put(b, static_cast<uint32_t>(v.as_u64()));
            break;
        case GGUFType::I32:
            put(b, static_cast<int32_t>(v.as_i64()));
            break;
        case GGUFType::U64:
            put(b, v.as_u64());
            break;
        case GGUFType::I64:
            put(b, v.as_i64());
            break;
        case GGUFType::F32:
            put(b, v.as_f32());
            break;
        case GGUFType::F64:
            put(b, v.as_f64());
            break;
        case GGUFType::BOOL:
            put(b, static_cast<uint8_t>(v.as_bool() ? 1 : 0));
            break;
        case GGUFType::STRING: {
            const std::string_view s = v.as_string_view();
            put<uint64_t>(b, s.size());
            b.insert(b.end(), s.begin(), s.end());
            break;
        }
        case GGUFType::ARRAY: {
            put(b, static_cast<uint32_t>(v.array_type()));
            put<uint64_t>(b, v.size());
            const auto bytes = v.array_bytes();
            b.insert(b.end(), bytes.begin(), bytes.end());
            break;
        }
    }
}

}  // namespace

GGUFValue GGUFValue::array(GGUFType elem, const std::vector<GGUFValue>& items) {
    SYSLM_CHECK(gguf_type_valid(static_cast<uint32_t>(elem)), "invalid array element type ",
                static_cast<uint32_t>(elem));
    auto buf = std::make_shared<std::vector<uint8_t>>();
    for (size_t i = 0; i < items.size(); ++i) {
        SYSLM_CHECK(items[i].type() == elem, "array of ", gguf_type_name(elem), ": element ", i,
                    " is a ", gguf_type_name(items[i].type()));
        encode(*buf, items[i]);
    }
    const std::span<const uint8_t> bytes(*buf);
    size_t off = 0;
    // Scanning the encoding also refuses nesting deeper than kGGUFMaxArrayDepth.
    return view_array(elem, items.size(), bytes, off, std::move(buf));
}

GGUFValue GGUFValue::strings(const std::vector<std::string>& v) {
    size_t total = 0;
    for (const auto& s : v) total += 8 + s.size();
    auto buf = std::make_shared<std::vector<uint8_t>>();
    buf->reserve(total);
    for (const auto& s : v) {
        put<uint64_t>(*buf, s.size());
        buf->insert(buf->end(), s.begin(), s.end());
    }
    const std::span<const uint8_t> bytes(*buf);
    size_t off = 0;
    return view_array(GGUFType::STRING, v.size(), bytes, off, std::move(buf));
}

namespace {

template <class T>
std::shared_ptr<std::vector<uint8_t>> packed(std::span<const T> v) {
    auto buf = std::make_shared<std::vector<uint8_t>>(v.size_bytes());
    if (!v.empty()) std::memcpy(buf->data(), v.data(), v.size_bytes());
    return buf;
}

}  // namespace

GGUFValue GGUFValue::f32s(std::span<const float> v) {
    auto buf = packed(v);
    const std::span<const uint8_t> bytes(*buf);
    size_t off = 0;
    return view_array(GGUFType::F32, v.size(), bytes, off, std::move(buf));
}

GGUFValue GGUFValue::i32s(std::span<const int32_t> v) {
    auto buf = packed(v);
    const std::span<const uint8_t> bytes(*buf);
    size_t off = 0;
    return view_array(GGUFType::I32, v.size(), bytes, off, std::move(buf));
}

GGUFValue GGUFValue::u32s(std::span<const uint32_t> v) {
    auto buf = packed(v);
    const std::span<const uint8_t> bytes(*buf);
    size_t off = 0;
    return view_array(GGUFType::U32, v.size(), bytes, off, std::move(buf));
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
    if (type_ == GGUFType::F32) return g_;
    if (type_ == GGUFType::F64) return f_;
    if (is_unsigned(type_)) return static_cast<double>(u_);
    if (is_signed(type_)) return static_cast<double>(i_);
    fail("expected a number, found ", describe(*this));
}

float GGUFValue::as_f32() const {
    return type_ == GGUFType::F32 ? g_ : static_cast<float>(as_f64());
}

bool GGUFValue::as_bool() const {
    if (type_ != GGUFType::BOOL) fail("expected a bool, found ", describe(*this));
    return u_ != 0;
}

std::string_view GGUFValue::as_string_view() const {
    if (type_ != GGUFType::STRING) fail("expected a string, found ", describe(*this));
    return {reinterpret_cast<const char*>(bytes_.data()), bytes_.size()};
}

std::string GGUFValue::as_string() const {
    return std::string(as_string_view());
}

std::span<const uint8_t> GGUFValue::array_bytes() const {
    if (type_ != GGUFType::ARRAY) fail("expected an array, found ", describe(*this));
    return bytes_;
}

GGUFValue GGUFValue::item(size_t i) const {
    if (type_ != GGUFType::ARRAY) fail("expected an array, found ", describe(*this));
    if (i >= count_)
        fail("array element ", i, " is out of range: the array of ", gguf_type_name(array_type_),
             " has ", count_, " elements");
    size_t off = 0;
    if (const size_t fixed = gguf_scalar_size(array_type_)) {
        off = i * fixed;
    } else {
        size_t j = 0;
        if (index_) {
            j = i / kIndexStride * kIndexStride;
            off = (*index_)[i / kIndexStride];
        }
        for (; j < i; ++j) skip(array_type_, bytes_, off, 2);
    }
    return decode(array_type_, bytes_, off, owner_);
}

void GGUFValue::for_each_item(const std::function<void(size_t, const GGUFValue&)>& f,
                              size_t limit) const {
    if (type_ != GGUFType::ARRAY) fail("expected an array, found ", describe(*this));
    const size_t n = static_cast<size_t>(std::min<uint64_t>(limit, count_));
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
        const GGUFValue v = decode(array_type_, bytes_, off, owner_);
        f(i, v);
    }
}

std::vector<std::string> GGUFValue::as_strings() const {
    if (type_ != GGUFType::ARRAY || array_type_ != GGUFType::STRING)
        fail("expected an array of strings, found ", describe(*this));
    std::vector<std::string> out;
    out.reserve(size());
    for_each_item([&](size_t, const GGUFValue& v) { out.emplace_back(v.as_string_view()); });
    return out;
}

std::vector<float> GGUFValue::as_f32s() const {
    if (type_ != GGUFType::ARRAY ||
        !(is_float(array_type_) || is_signed(array_type_) || is_unsigned(array_type_)))
        fail("expected an array of numbers, found ", describe(*this));
    std::vector<float> out;
    out.reserve(size());
    if (array_type_ == GGUFType::F32) {  // the common case (token scores) is a plain copy
        out.resize(size());
        if (!out.empty()) std::memcpy(out.data(), bytes_.data(), out.size() * sizeof(float));
        return out;
    }
    for_each_item([&](size_t, const GGUFValue& v) { out.push_back(v.as_f32()); });
    return out;
}

std::vector<int32_t> GGUFValue::as_i32s() const {
    if (type_ != GGUFType::ARRAY || !(is_signed(array_type_) || is_unsigned(array_type_)))
        fail("expected an array of integers, found ", describe(*this));
    std::vector<int32_t> out;
    out.reserve(size());
    for_each_item([&](size_t i, const GGUFValue& v) {
        try {
            out.push_back(v.as_i32());
        } catch (const Error& e) {
            fail("array element ", i, ": ", e.what());
        }
    });
    return out;
}

void GGUFValue::write_display(const std::function<void(std::string_view)>& out,
                              size_t max_items) const {
    switch (type_) {
        case GGUFType::U8:
        case GGUFType::U16:
        case GGUFType::U32:
        case GGUFType::U64:
            out(std::to_string(u_));
            return;
        case GGUFType::I8:
        case GGUFType::I16:
        case GGUFType::I32:
        case GGUFType::I64:
            out(std::to_string(i_));
            return;
        case GGUFType::F32:
            out(format_double(g_, true));
            return;
        case GGUFType::F64:
            out(format_double(f_, false));
            return;
        case GGUFType::BOOL:
            out(u_ ? "true" : "false");
            return;
        case GGUFType::STRING:
            out(quote(as_string_view(), 120));
            return;
        case GGUFType::ARRAY: {
            // max_items == 0 shows every element.
            const size_t shown = max_items == 0 ? size() : std::min(max_items, size());
            out("[");
            for_each_item(
                [&](size_t i, const GGUFValue& v) {
                    if (i) out(", ");
                    // Long strings inside arrays (merges, chat templates) are cut shorter.
                    if (v.type_ == GGUFType::STRING) {
                        out(quote(v.as_string_view(), 40));
                    } else {
                        v.write_display(out, max_items);
                    }
                },
                shown);
            if (shown < size()) out(cat(shown ? ", " : "", "... ", size() - shown, " more"));
            out("]");
            return;
        }
    }
    out("?");
}

std::string GGUFValue::to_display(size_t max_items) const {
    std::string s;
    write_display([&](std::string_view piece) { s += piece; }, max_items);
    return s;
}

}  // namespace syslm::io
