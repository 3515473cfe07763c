// GGUFFile: parses and validates a GGUF v2/v3 file held in memory (normally an mmap).
//
// Every length, count and offset in the file is untrusted: it is checked against the bytes that
// remain before anything is allocated or dereferenced, so a hostile file costs at most memory
// proportional to its own size, and every violation becomes one Error naming the file, what is
// wrong and the byte offset of the offending field. Metadata strings and arrays are not copied:
// once validated they become views of the bytes (GGUFValue), kept alive by the shared mapping.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "core/error.hpp"
#include "io/gguf.hpp"

namespace syslm::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF is read by memcpy: little-endian hosts only");

// The smallest number of bytes one array element of type t can occupy: bounds element counts
// by the bytes left in the file before anything is reserved.
size_t min_element_bytes(GGUFType t) {
    if (t == GGUFType::STRING) return 8;  // u64 length
    if (t == GGUFType::ARRAY) return 12;  // u32 element type + u64 count
    return gguf_scalar_size(t);
}

// Names of GGML type ids syslm does not implement, so the error can say what the file holds.
const char* unsupported_ggml_type_name(uint32_t id) {
    switch (id) {
        case 4:
            return "Q4_2 (removed from ggml)";
        case 5:
            return "Q4_3 (removed from ggml)";
        case 16:
            return "IQ2_XXS";
        case 17:
            return "IQ2_XS";
        case 18:
            return "IQ3_XXS";
        case 19:
            return "IQ1_S";
        case 20:
            return "IQ4_NL";
        case 21:
            return "IQ3_S";
        case 22:
            return "IQ2_S";
        case 23:
            return "IQ4_XS";
        case 29:
            return "IQ1_M";
        case 31:
            return "Q4_0_4_4 (removed from ggml)";
        case 32:
            return "Q4_0_4_8 (removed from ggml)";
        case 33:
            return "Q4_0_8_8 (removed from ggml)";
        case 34:
            return "TQ1_0";
        case 35:
            return "TQ2_0";
        case 39:
            return "MXFP4";
        default:
            return nullptr;
    }
}

// Reads little-endian fields with bounds checks; `ctx` names the key or tensor being parsed.
class Cursor {
public:
    Cursor(std::span<const uint8_t> bytes, const std::string& file) : b_(bytes), file_(file) {}

    size_t pos() const { return pos_; }
    size_t remaining() const { return b_.size() - pos_; }
    void set_context(std::string ctx) { ctx_ = std::move(ctx); }

    template <class... Args>
    [[noreturn]] void error_at(size_t at, Args&&... args) const {
        fail(file_, ": ", ctx_, ctx_.empty() ? "" : ": ", std::forward<Args>(args)..., " (at byte ",
             at, ")");
    }

    void need(size_t n, const char* what) const {
        if (n > remaining())
            error_at(pos_, "truncated file: ", what, " needs ", n, " bytes but only ", remaining(),
                     " remain of ", b_.size());
    }

    template <class T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, b_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    void skip(size_t n, const char* what) {
        need(n, what);
        pos_ += n;
    }

    // A u64 length and that many bytes; returns them as a view.
    std::string_view view_string(const char* what) {
        const size_t at = pos_;
        const uint64_t len = read<uint64_t>(what);
        if (len > remaining())
            error_at(at, "truncated file or absurd length: ", what, " claims ", len,
                     " bytes but only ", remaining(), " remain of ", b_.size());
        const std::string_view s(reinterpret_cast<const char*>(b_.data() + pos_),
                                 static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return s;
    }
    std::string read_string(const char* what) { return std::string(view_string(what)); }
    void skip_string(const char* what) { view_string(what); }

private:
    std::span<const uint8_t> b_;
    const std::string& file_;
    std::string ctx_;
    size_t pos_ = 0;
};

GGUFType read_type(Cursor& c, const char* what) {
    const size_t at = c.pos();
    const uint32_t id = c.read<uint32_t>(what);
    if (!gguf_type_valid(id)) c.error_at(at, "invalid value type ", id, " (valid types are 0..12)");
    return static_cast<GGUFType>(id);
}

// Validates one value of type t at the cursor and moves past it, copying nothing: every string
// length and array count is checked against the bytes that remain, every nested element type and
// bool value is checked. `depth` is the nesting of arrays around it (0 for a key's value).
void check_value(Cursor& c, GGUFType t, int depth) {
    switch (t) {
        case GGUFType::U8:
            return c.skip(1, "u8 value");
        case GGUFType::I8:
            return c.skip(1, "i8 value");
        case GGUFType::U16:
            return c.skip(2, "u16 value");
        case GGUFType::I16:
            return c.skip(2, "i16 value");
        case GGUFType::U32:
            return c.skip(4, "u32 value");
        case GGUFType::I32:
            return c.skip(4, "i32 value");
        case GGUFType::U64:
            return c.skip(8, "u64 value");
        case GGUFType::I64:
            return c.skip(8, "i64 value");
        case GGUFType::F32:
            return c.skip(4, "f32 value");
        case GGUFType::F64:
            return c.skip(8, "f64 value");
        case GGUFType::BOOL: {
            const size_t at = c.pos();
            const uint8_t v = c.read<uint8_t>("bool value");
            if (v > 1) c.error_at(at, "invalid bool value ", int(v), " (must be 0 or 1)");
            return;
        }
        case GGUFType::STRING:
            return c.skip_string("string value");
        case GGUFType::ARRAY: {
            const size_t at = c.pos();
            if (depth >= kGGUFMaxArrayDepth)
                c.error_at(at, "arrays nested deeper than ", kGGUFMaxArrayDepth, " levels");
            const GGUFType elem = read_type(c, "array element type");
            const size_t count_at = c.pos();
            const uint64_t n = c.read<uint64_t>("array length");
            const uint64_t fits = c.remaining() / min_element_bytes(elem);
            if (n > fits)
                c.error_at(count_at, "truncated file or absurd array length ", n,
                           ": the remaining ", c.remaining(), " bytes hold at most ", fits,
                           " elements of type ", gguf_type_name(elem));
            // Fixed-size elements other than bool need no look: the count check covers them.
            const size_t fixed = gguf_scalar_size(elem);
            if (fixed && elem != GGUFType::BOOL)
                return c.skip(static_cast<size_t>(n) * fixed, "array elements");
            for (uint64_t i = 0; i < n; ++i) check_value(c, elem, depth + 1);
            return;
        }
    }
    c.error_at(c.pos(), "invalid value type ", static_cast<uint32_t>(t));
}

size_t align_up(size_t x, size_t a) {
    return x + (a - x % a) % a;
}

}  // namespace

int64_t GGUFTensor::numel() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
}

GGUFFile::GGUFFile(const std::string& path) : path_(path) {
    map_ = std::make_shared<const MappedFile>(path);
    bytes_ = map_->bytes();
    parse();
}

GGUFFile::GGUFFile(std::span<const uint8_t> bytes, std::string name)
    : path_(std::move(name)), bytes_(bytes) {
    parse();
}

namespace {

// The header: magic and version checked; returns the tensor and key counts, each checked
// against the bytes left (a key/value takes at least 13 bytes: key length, type, one-byte value;
// a tensor info at least 32: name length, n_dims, one dim, type, offset).
struct HeaderCounts {
    uint32_t version;
    uint64_t n_tensors, n_kv;
};
HeaderCounts read_header(Cursor& c, std::span<const uint8_t> bytes) {
    if (bytes.size() < 4)
        c.error_at(0, "truncated file: ", bytes.size(), " bytes is too short for a GGUF header");
    if (std::memcmp(bytes.data(), "GGUF", 4) != 0) {
        std::string shown;
        for (size_t i = 0; i < 4; ++i) {
            const char ch = static_cast<char>(bytes[i]);
            shown += (bytes[i] >= 0x20 && bytes[i] < 0x7f) ? std::string(1, ch)
                                                           : cat("\\x", std::hex, int(bytes[i]));
        }
        c.error_at(0, "not a GGUF file: bad magic '", shown, "' (expected 'GGUF')");
    }
    c.read<uint32_t>("magic");
    HeaderCounts h{};
    const size_t version_at = c.pos();
    h.version = c.read<uint32_t>("version");
    if (h.version == 1)
        c.error_at(version_at, "GGUF version 1 is not supported (syslm reads versions 2 and 3)");
    if (h.version != 2 && h.version != 3) {
        const uint32_t swapped = __builtin_bswap32(h.version);
        if (swapped == 2 || swapped == 3)
            c.error_at(version_at, "big-endian GGUF files are not supported");
        c.error_at(version_at, "unsupported GGUF version ", h.version,
                   " (syslm reads versions 2 and 3)");
    }
    const size_t n_tensors_at = c.pos();
    h.n_tensors = c.read<uint64_t>("tensor count");
    const size_t n_kv_at = c.pos();
    h.n_kv = c.read<uint64_t>("metadata key count");
    if (h.n_kv > c.remaining() / 13)
        c.error_at(n_kv_at, "truncated file or absurd metadata key count ", h.n_kv,
                   ": the remaining ", c.remaining(), " bytes hold at most ", c.remaining() / 13);
    if (h.n_tensors > c.remaining() / 32)
        c.error_at(n_tensors_at, "truncated file or absurd tensor count ", h.n_tensors,
                   ": the remaining ", c.remaining(), " bytes hold at most ", c.remaining() / 32);
    return h;
}

// Tensor info #i: name, dimensions, type and data offset, each checked where it is read.
GGUFTensor read_tensor_info(Cursor& c, uint64_t i, size_t alignment, size_t file_size,
                            std::unordered_set<std::string>& names) {
    const size_t name_at = c.pos();
    c.set_context(cat("tensor #", i));
    GGUFTensor t;
    t.name = c.read_string("tensor name");
    if (!names.insert(t.name).second)
        c.error_at(name_at, "duplicate tensor name '", t.name, "'");
    c.set_context(cat("tensor '", t.name, "'"));

    const size_t dims_at = c.pos();
    const uint32_t n_dims = c.read<uint32_t>("n_dims");
    if (n_dims == 0 || n_dims > kGGUFMaxDims)
        c.error_at(dims_at, "n_dims is ", n_dims, " (must be 1..", kGGUFMaxDims, ")");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
        const size_t at = c.pos();
        const uint64_t v = c.read<uint64_t>("dimension");
        if (v == 0 || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            c.error_at(at, "dimension ", d, " is ", static_cast<int64_t>(v),
                       " (must be positive)");
        if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / v)
            c.error_at(at, "element count overflows: dimension ", d, " is ", v);
        numel *= v;
        t.ne.push_back(static_cast<int64_t>(v));
    }

    const size_t type_at = c.pos();
    const uint32_t type_id = c.read<uint32_t>("tensor type");
    const DTypeInfo* info = dtype_info(type_id);
    if (!info || info->runtime_only) {
        const char* known = unsupported_ggml_type_name(type_id);
        if (known)
            c.error_at(type_at, "tensor type id ", type_id, " (", known,
                       ") is not supported by syslm");
        c.error_at(type_at, "unknown tensor type id ", type_id);
    }
    t.type = static_cast<DType>(type_id);
    if (t.ne[0] % info->block_size != 0)
        c.error_at(type_at, "row length ", t.ne[0], " is not a multiple of the ", info->name,
                   " block size ", info->block_size);
    const uint64_t blocks = numel / static_cast<uint64_t>(info->block_size);
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(info->type_size), &nbytes) ||
        nbytes > file_size)
        c.error_at(type_at, "tensor of ", numel, " ", info->name, " elements (",
                   static_cast<double>(blocks) * static_cast<double>(info->type_size),
                   " bytes) is larger than the whole file (", file_size, " bytes)");
    t.nbytes = static_cast<size_t>(nbytes);

    const size_t offset_at = c.pos();
    t.offset = c.read<uint64_t>("tensor data offset");
    if (t.offset % alignment != 0)
        c.error_at(offset_at, "data offset ", t.offset, " is not a multiple of the alignment ",
                   alignment);
    return t;
}

}  // namespace

void GGUFFile::parse() {
    Cursor c(bytes_, path_);
    const HeaderCounts h = read_header(c, bytes_);
    version_ = h.version;
    const uint64_t n_kv = h.n_kv, n_tensors = h.n_tensors;

    // Metadata.
    kv_.reserve(static_cast<size_t>(n_kv));
    std::unordered_set<std::string> keys;
    for (uint64_t i = 0; i < n_kv; ++i) {
        const size_t key_at = c.pos();
        c.set_context(cat("metadata key #", i));
        std::string key = c.read_string("key");
        if (!keys.insert(key).second) c.error_at(key_at, "duplicate key '", key, "'");
        c.set_context(cat("key '", key, "'"));
        const GGUFType t = read_type(c, "value type");
        size_t off = c.pos();
        check_value(c, t, 0);
        // Validated: decoding makes strings and arrays views of the bytes, owned by the mapping.
        kv_.emplace_back(std::move(key), GGUFValue::decode(t, bytes_, off, map_));
    }
    c.set_context("");

    if (const GGUFValue* a = find("general.alignment")) {
        uint64_t align = 0;
        try {
            align = a->as_u64();
        } catch (const Error& e) {
            fail(path_, ": key 'general.alignment': ", e.what());
        }
        if (align == 0 || (align & (align - 1)) != 0 || align > (uint64_t{1} << 30))
            fail(path_, ": key 'general.alignment' is ", align,
                 ": it must be a power of two (at most 2^30)");
        alignment_ = static_cast<size_t>(align);
    }

    // Tensor infos.
    tensors_.reserve(static_cast<size_t>(n_tensors));
    std::unordered_set<std::string> names;
    for (uint64_t i = 0; i < n_tensors; ++i)
        tensors_.push_back(read_tensor_info(c, i, alignment_, bytes_.size(), names));
    c.set_context("");
    place_tensor_data(c.pos());
}

// Tensor data: aligned after the infos (a file without tensors may end without the padding);
// every tensor inside the file, none overlapping another.
void GGUFFile::place_tensor_data(size_t infos_end) {
    data_offset_ = align_up(infos_end, alignment_);
    if (tensors_.empty()) return;
    if (data_offset_ > bytes_.size())
        fail(path_, ": truncated file: the tensor data section starts at byte ", data_offset_,
             " but the file has only ", bytes_.size(), " bytes");
    const uint64_t data_size = bytes_.size() - data_offset_;
    for (auto& t : tensors_) {
        if (t.offset > data_size || t.nbytes > data_size - t.offset)
            fail(path_, ": tensor '", t.name, "': data at bytes [", data_offset_ + t.offset, ", ",
                 static_cast<double>(data_offset_) + static_cast<double>(t.offset) + t.nbytes,
                 ") extends beyond the end of the file (", bytes_.size(), " bytes)");
        t.data = bytes_.data() + data_offset_ + t.offset;
    }
    std::vector<const GGUFTensor*> by_offset;
    by_offset.reserve(tensors_.size());
    for (const auto& t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GGUFTensor* a, const GGUFTensor* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const GGUFTensor& a = *by_offset[i - 1];
        const GGUFTensor& b = *by_offset[i];
        if (a.offset + a.nbytes > b.offset)
            fail(path_, ": tensors '", a.name, "' (bytes ", data_offset_ + a.offset, "..",
                 data_offset_ + a.offset + a.nbytes, ") and '", b.name, "' (from byte ",
                 data_offset_ + b.offset, ") overlap");
    }
}

const GGUFValue* GGUFFile::find(std::string_view key) const {
    for (const auto& [k, v] : kv_)
        if (k == key) return &v;
    return nullptr;
}

const GGUFValue& GGUFFile::get(std::string_view key) const {
    const GGUFValue* v = find(key);
    if (!v) fail(path_, ": missing key ", key);
    return *v;
}

namespace {

// Runs a conversion and adds the file and key to its error.
template <class F>
auto with_key(const std::string& file, std::string_view key, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const Error& e) {
        fail(file, ": key ", key, ": ", e.what());
    }
}

}  // namespace

std::string GGUFFile::get_string(std::string_view key) const {
    const GGUFValue& v = get(key);
    return with_key(path_, key, [&] { return v.as_string(); });
}
uint32_t GGUFFile::get_u32(std::string_view key) const {
    const GGUFValue& v = get(key);
    return with_key(path_, key, [&] { return v.as_u32(); });
}
float GGUFFile::get_f32(std::string_view key) const {
    const GGUFValue& v = get(key);
    return with_key(path_, key, [&] { return v.as_f32(); });
}
bool GGUFFile::get_bool(std::string_view key) const {
    const GGUFValue& v = get(key);
    return with_key(path_, key, [&] { return v.as_bool(); });
}
std::string GGUFFile::get_string(std::string_view key, std::string def) const {
    return find(key) ? get_string(key) : def;
}
uint32_t GGUFFile::get_u32(std::string_view key, uint32_t def) const {
    return find(key) ? get_u32(key) : def;
}
float GGUFFile::get_f32(std::string_view key, float def) const {
    return find(key) ? get_f32(key) : def;
}
bool GGUFFile::get_bool(std::string_view key, bool def) const {
    return find(key) ? get_bool(key) : def;
}

const GGUFTensor* GGUFFile::find_tensor(std::string_view name) const {
    for (const auto& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

const GGUFTensor& GGUFFile::tensor(std::string_view name) const {
    const GGUFTensor* t = find_tensor(name);
    if (!t) fail(path_, ": missing tensor ", name);
    return *t;
}

}  // namespace syslm::io
