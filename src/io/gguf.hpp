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
class GGUFValue {
public:
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
    static GGUFValue strings(std::vector<std::string> v);
    static GGUFValue array(GGUFType elem, std::vector<GGUFValue> items);  // any element type
    static GGUFValue f32s(std::span<const float> v);
    static GGUFValue i32s(std::span<const int32_t> v);
    static GGUFValue u32s(std::span<const uint32_t> v);

    GGUFType type() const { return type_; }
    bool is_array() const { return type_ == GGUFType::ARRAY; }
    GGUFType array_type() const { return array_type_; }  // only for arrays
    size_t size() const { return items_.size(); }        // number of array elements

    uint64_t as_u64() const;  // any integer type (or bool) that is >= 0
    int64_t as_i64() const;   // any integer type that fits
    uint32_t as_u32() const;
    int32_t as_i32() const;
    double as_f64() const;  // any numeric type
    float as_f32() const { return static_cast<float>(as_f64()); }
    bool as_bool() const;
    const std::string& as_string() const;
    const std::vector<GGUFValue>& items() const;  // array elements
    std::vector<std::string> as_strings() const;  // array of strings
    std::vector<float> as_f32s() const;           // array of any numeric type
    std::vector<int32_t> as_i32s() const;         // array of any integer type that fits

    std::string to_display(size_t max_items = 8) const;  // short human-readable form

private:
    GGUFType type_ = GGUFType::U8;
    GGUFType array_type_ = GGUFType::U8;
    // One payload per type (tokenizer arrays hold ~10^5 values, so each value stays small).
    union {
        uint64_t u_ = 0;  // unsigned ints and bool
        int64_t i_;       // signed ints
        double f_;        // floats
    };
    std::string s_;
    std::vector<GGUFValue> items_;
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
// against the bytes that remain.
class GGUFFile {
public:
    explicit GGUFFile(const std::string& path);  // mmaps the file
    // Parses bytes owned by the caller (fuzzing, tests); `name` is used in error messages.
    GGUFFile(std::span<const uint8_t> bytes, std::string name);

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

    std::string path_;
    std::unique_ptr<MappedFile> map_;
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
    // Adds or replaces a key; keys keep their first insertion order.
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
