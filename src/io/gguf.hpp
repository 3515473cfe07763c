// GGUF v3: the native model format of syslm (and llama.cpp). Spec:
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
//
// File layout: header (magic "GGUF", version, tensor count, kv count) -> metadata key/values
// -> tensor infos (name, n_dims, ne[], type, offset) -> padding to `general.alignment`
// (default 32) -> tensor data. All integers little-endian.
//
// Shapes use GGML order everywhere in syslm: ne[0] is the contiguous (innermost) dimension, so a
// PyTorch Linear weight of shape [out, in] has ne = {in, out}.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/mapped_file.hpp"

namespace syslm::io {

enum class GGUFType : uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
};
std::string_view gguf_type_name(GGUFType t);  // "u8", ..., "string", "array"; "?" if unknown
bool gguf_type_valid(uint32_t id);            // one of the 13 value types of the spec
// Bytes of one scalar of type t on disk (0 for STRING and ARRAY, whose size varies).
size_t gguf_scalar_size(GGUFType t);

inline constexpr uint32_t kGGUFVersion = 3;          // what GGUFWriter writes
inline constexpr size_t kGGUFDefaultAlignment = 32;  // when general.alignment is absent
inline constexpr int kGGUFMaxDims = 4;               // GGML_MAX_DIMS
inline constexpr size_t kGGUFMaxTensorName = 63;     // GGML_MAX_NAME - 1 (llama.cpp's limit)
inline constexpr int kGGUFMaxArrayDepth = 32;        // nesting of arrays of arrays we accept

// One metadata value: a scalar, a string, or an array of one element type (arrays of arrays are
// allowed by the spec and kept). Accessors convert between numeric types when the value fits and
// throw Error ("expected ..., found ...") otherwise; the caller adds the key name.
//
// Strings and arrays are views of their GGUF encoding (little-endian, as in the file): a string is
// its bytes; an array is its element type, its count and its encoded elements (array_bytes()). So
// metadata costs no more than the bytes it occupies, however many elements it has. The bytes are
// kept alive by an owner that every copy of the value shares:
//   - values read by GGUFFile(path) hold the file's mapping, so they stay valid after the GGUFFile
//     is gone (a GGUFWriter can hold them until write()); holding one keeps the whole mapping, and
//     the pages of it that were read, alive;
//   - values read by GGUFFile(span, name) have no owner: the caller's bytes must outlive every
//     value (and every copy of one) read from them;
//   - values built in memory (string, strings, array, f32s, ...) own a buffer with the encoding.
// item(i) costs O(1) for fixed-size element types; arrays of strings or arrays keep the byte offset
// of every kIndexStride-th element (1/8 byte per element), so item(i) scans at most
// kIndexStride - 1 elements. for_each_item visits elements in order without that scan.
// Values are immutable: copies and concurrent reads from several threads are safe.
class GGUFValue {
public:
    static constexpr size_t kIndexStride = 64;

    GGUFValue() = default;
    static GGUFValue u8(uint8_t v);
    static GGUFValue i8(int8_t v);
    static GGUFValue u16(uint16_t v);
    static GGUFValue i16(int16_t v);
    static GGUFValue u32(uint32_t v);
    static GGUFValue i32(int32_t v);
    static GGUFValue u64(uint64_t v);
    static GGUFValue i64(int64_t v);
    static GGUFValue f32(float v);
    static GGUFValue f64(double v);
    static GGUFValue boolean(bool v);
    static GGUFValue string(std::string v);
    static GGUFValue strings(const std::vector<std::string>& v);
    // Any element type; every item must have it. Refuses arrays nested deeper than
    // kGGUFMaxArrayDepth levels (which no reader would accept).
    static GGUFValue array(GGUFType elem, const std::vector<GGUFValue>& items);
    static GGUFValue f32s(std::span<const float> v);
    static GGUFValue i32s(std::span<const int32_t> v);
    static GGUFValue u32s(std::span<const uint32_t> v);

    GGUFType type() const { return type_; }
    bool is_array() const { return type_ == GGUFType::ARRAY; }
    GGUFType array_type() const { return array_type_; }          // only for arrays
    size_t size() const { return static_cast<size_t>(count_); }  // number of array elements

    uint64_t as_u64() const;  // any integer type (or bool) that is >= 0
    int64_t as_i64() const;   // any integer type that fits
    uint32_t as_u32() const;
    int32_t as_i32() const;
    double as_f64() const;  // any numeric type
    float as_f32() const;   // an F32 value exactly (a signalling NaN keeps its bits)
    bool as_bool() const;
    std::string as_string() const;  // a copy of the string's bytes
    // The string's bytes, valid as long as the value's owner (see above).
    std::string_view as_string_view() const;

    // Element i of an array: a scalar, a string or a nested array (a view sharing this owner).
    // Throws Error when this is not an array or i >= size().
    GGUFValue item(size_t i) const;
    // Calls f(i, item(i)) for the first min(limit, size()) elements, in order.
    void for_each_item(const std::function<void(size_t, const GGUFValue&)>& f,
                       size_t limit = static_cast<size_t>(-1)) const;
    // The encoded elements of an array, as in a GGUF file after the element type and count:
    // fixed-size elements packed little-endian, strings as u64 length + bytes, nested arrays as
    // u32 element type + u64 count + elements. Valid as long as the value's owner.
    std::span<const uint8_t> array_bytes() const;
    // These materialise every element (the caller asked for all of them).
    std::vector<std::string> as_strings() const;  // array of strings
    std::vector<float> as_f32s() const;           // array of any numeric type
    std::vector<int32_t> as_i32s() const;         // array of any integer type that fits

    std::string to_display(size_t max_items = 8) const;  // short human-readable form
    // The same text, handed to `out` in pieces (for long forms: max_items 0 shows every element).
    void write_display(const std::function<void(std::string_view)>& out,
                       size_t max_items = 8) const;

private:
    friend class GGUFFile;
    // Decodes the element of type t encoded at bytes[off] (validated before: bounds are still
    // checked) and moves off past it. Strings and arrays become views sharing `owner`.
    static GGUFValue decode(GGUFType t, std::span<const uint8_t> bytes, size_t& off,
                            const std::shared_ptr<const void>& owner);
    // An array view of `count` elements of type elem encoded from bytes[off]; moves off past them.
    static GGUFValue view_array(GGUFType elem, uint64_t count, std::span<const uint8_t> bytes,
                                size_t& off, const std::shared_ptr<const void>& owner);

    GGUFType type_ = GGUFType::U8;
    GGUFType array_type_ = GGUFType::U8;
    union {
        uint64_t u_ = 0;  // unsigned ints and bool
        int64_t i_;       // signed ints
        double f_;        // F64
        float g_;         // F32, kept as float: widening to double would quiet a signalling NaN
    };
    uint64_t count_ = 0;                 // array elements
    std::span<const uint8_t> bytes_;     // string: its bytes; array: its encoded elements
    std::shared_ptr<const void> owner_;  // keeps bytes_ alive (null for a caller's span)
    // Arrays of strings or arrays with more than kIndexStride elements: the offset in bytes_ of
    // elements 0, kIndexStride, 2 * kIndexStride, ...
    std::shared_ptr<const std::vector<size_t>> index_;
};

struct GGUFTensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;  // GGML order, ne[0] innermost; 1..4 dims
    uint64_t offset = 0;      // from the start of the data section
    size_t nbytes = 0;
    const uint8_t* data = nullptr;  // zero-copy view into the mapped file

    int64_t numel() const;
    int64_t rows() const { return ne.empty() ? 0 : numel() / ne[0]; }
};

// A parsed, validated GGUF file. Construction validates everything (magic, version, counts,
// string and array lengths, value types, tensor dims/types/offsets/sizes against the file size,
// alignment, duplicate keys and tensor names, overlapping tensor data); any violation throws one
// Error that names the file and what is wrong, with the byte offset where it applies. Versions 2
// and 3 are read (same layout); strings are kept as raw bytes (invalid UTF-8 is not an error).
// Memory use is bounded by the file size: no count or length is trusted before it is checked
// against the bytes that remain. Metadata strings and arrays are views of the bytes (see
// GGUFValue), so parsing allocates little beyond the keys and the tensor table.
class GGUFFile {
public:
    explicit GGUFFile(const std::string& path);  // mmaps the file
    // Parses bytes owned by the caller (fuzzing, tests); `name` is used in error messages. String
    // and array values are views of these bytes: they must outlive the values read from them.
    GGUFFile(std::span<const uint8_t> bytes, std::string name);
    GGUFFile(const GGUFFile&) = delete;
    GGUFFile& operator=(const GGUFFile&) = delete;
    GGUFFile(GGUFFile&&) = default;
    GGUFFile& operator=(GGUFFile&&) = default;

    const std::string& path() const { return path_; }
    // Whether the bytes are a read-only mapping of the file (not a caller's buffer): only then may
    // pages of it be released (core/mapped_file.hpp release_mapped_pages).
    bool mapped() const { return map_ != nullptr; }
    uint32_t version() const { return version_; }
    size_t alignment() const { return alignment_; }
    // Start of the tensor data section (aligned). A file without tensors may end before it.
    size_t data_offset() const { return data_offset_; }
    size_t file_size() const { return bytes_.size(); }

    const std::vector<std::pair<std::string, GGUFValue>>& metadata() const { return kv_; }
    const GGUFValue* find(std::string_view key) const;
    const GGUFValue& get(std::string_view key) const;  // throws "<file>: missing key <key>"
    // Typed getters that name the file and key when the key is missing or has the wrong type.
    std::string get_string(std::string_view key) const;
    uint32_t get_u32(std::string_view key) const;
    float get_f32(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    // Same, with a default when the key is absent (a present key of the wrong type still throws).
    std::string get_string(std::string_view key, std::string def) const;
    uint32_t get_u32(std::string_view key, uint32_t def) const;
    float get_f32(std::string_view key, float def) const;
    bool get_bool(std::string_view key, bool def) const;

    const std::vector<GGUFTensor>& tensors() const { return tensors_; }
    const GGUFTensor* find_tensor(std::string_view name) const;
    const GGUFTensor& tensor(std::string_view name) const;  // throws naming file and tensor

private:
    void parse();
    void place_tensor_data(size_t infos_end);

    std::string path_;
    std::shared_ptr<const MappedFile> map_;  // shared with the metadata values that view it
    std::span<const uint8_t> bytes_;
    uint32_t version_ = 0;
    size_t alignment_ = 32;
    size_t data_offset_ = 0;
    std::vector<std::pair<std::string, GGUFValue>> kv_;
    std::vector<GGUFTensor> tensors_;
};

// Builds a GGUF file in memory order and writes it atomically (temp file + rename).
class GGUFWriter {
public:
    // Adds or replaces a key; keys keep their first insertion order. A value read from a GGUFFile
    // keeps its bytes alive until write() (see GGUFValue), which copies them to the new file.
    void set(std::string key, GGUFValue value);
    void remove(std::string_view key);
    // `data` must stay valid until write(); nbytes must equal row_bytes(type, ne[0]) * rows.
    void add_tensor(std::string name, DType type, std::vector<int64_t> ne, const void* data,
                    size_t nbytes);
    // Same, with the writer owning the bytes.
    void add_tensor(std::string name, DType type, std::vector<int64_t> ne,
                    std::vector<uint8_t> bytes);
    // Same, with the bytes produced at write() time by fill(dst) into nbytes of scratch, so a
    // converter holds one tensor in memory at a time (an exception from fill aborts the write).
    void add_tensor(std::string name, DType type, std::vector<int64_t> ne, size_t nbytes,
                    std::function<void(uint8_t* dst)> fill);
    void write(const std::string& path) const;  // honours general.alignment if set

private:
    struct Pending {
        std::string name;
        DType type;
        std::vector<int64_t> ne;
        const void* data;
        size_t nbytes;
        std::shared_ptr<std::vector<uint8_t>> owned;
        std::function<void(uint8_t*)> fill;  // when set, data is null
    };
    void check_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                      size_t nbytes) const;
    std::vector<std::pair<std::string, GGUFValue>> kv_;
    std::vector<Pending> tensors_;
};

}  // namespace syslm::io
