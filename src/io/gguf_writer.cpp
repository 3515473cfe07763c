// GGUFWriter: lays out a GGUF v3 file (header, metadata in insertion order, tensor infos, aligned
// tensor data) and writes it through AtomicFileWriter, so readers never see a partial file.
// Metadata strings and arrays are written from the bytes of their values (already GGUF-encoded).
#include <cstring>
#include <limits>

#include "core/error.hpp"
#include "io/gguf.hpp"

namespace syslm::io {
namespace {

// Buffers the small fields of the header and writes large ones (long strings, array elements)
// straight from their bytes, so that writing costs no copy of the metadata.
class HeaderSink {
public:
    explicit HeaderSink(AtomicFileWriter& out) : out_(out) {}

    template <class T>
    void put(T v) {
        const size_t at = buf_.size();
        buf_.resize(at + sizeof(T));
        std::memcpy(buf_.data() + at, &v, sizeof(T));
        if (buf_.size() >= kFlushAt) flush();
    }
    void put_bytes(const void* p, size_t n) {
        if (n >= kFlushAt) {
            flush();
            out_.write(p, n);
            written_ += n;
            return;
        }
        const auto* b = static_cast<const uint8_t*>(p);
        buf_.insert(buf_.end(), b, b + n);
        if (buf_.size() >= kFlushAt) flush();
    }
    void put_string(std::string_view s) {
        put<uint64_t>(s.size());
        put_bytes(s.data(), s.size());
    }
    size_t size() const { return written_ + buf_.size(); }
    void flush() {
        if (buf_.empty()) return;
        out_.write(buf_.data(), buf_.size());
        written_ += buf_.size();
        buf_.clear();
    }

private:
    static constexpr size_t kFlushAt = size_t{1} << 16;
    AtomicFileWriter& out_;
    std::vector<uint8_t> buf_;
    size_t written_ = 0;
};

// Writes the value's payload (no type tag); an array writes its element type, count, elements.
void put_value(HeaderSink& b, const GGUFValue& v) {
    switch (v.type()) {
        case GGUFType::U8:
            b.put(static_cast<uint8_t>(v.as_u64()));
            break;
        case GGUFType::I8:
            b.put(static_cast<int8_t>(v.as_i64()));
            break;
        case GGUFType::U16:
            b.put(static_cast<uint16_t>(v.as_u64()));
            break;
        case GGUFType::I16:
            b.put(static_cast<int16_t>(v.as_i64()));
            break;
        case GGUFType::U32:
            b.put(static_cast<uint32_t>(v.as_u64()));
            break;
        case GGUFType::I32:
            b.put(static_cast<int32_t>(v.as_i64()));
            break;
        case GGUFType::U64:
            b.put(v.as_u64());
            break;
        case GGUFType::I64:
            b.put(v.as_i64());
            break;
        case GGUFType::F32:
            b.put(v.as_f32());
            break;
        case GGUFType::F64:
            b.put(v.as_f64());
            break;
        case GGUFType::BOOL:
            b.put(static_cast<uint8_t>(v.as_bool() ? 1 : 0));
            break;
        case GGUFType::STRING:
            b.put_string(v.as_string_view());
            break;
        case GGUFType::ARRAY: {
            // The elements are already in GGUF's encoding: written verbatim.
            b.put(static_cast<uint32_t>(v.array_type()));
            b.put<uint64_t>(v.size());
            const auto bytes = v.array_bytes();
            b.put_bytes(bytes.data(), bytes.size());
            break;
        }
    }
}

size_t align_up(size_t x, size_t a) {
    return x + (a - x % a) % a;
}

}  // namespace

void GGUFWriter::set(std::string key, GGUFValue value) {
    if (key == "general.alignment") {
        // The spec (and llama.cpp, which asserts on it) wants this key as u32.
        uint64_t a = 0;
        try {
            a = value.as_u64();
        } catch (const Error& e) {
            fail("GGUFWriter: general.alignment: ", e.what());
        }
        SYSLM_CHECK(a != 0 && (a & (a - 1)) == 0 && a <= (uint64_t{1} << 30),
                    "GGUFWriter: general.alignment must be a power of two (at most 2^30), got ", a);
        value = GGUFValue::u32(static_cast<uint32_t>(a));
    }
    // Arrays nested deeper than our own reader accepts cannot exist: GGUFValue::array refuses
    // them, and the reader refuses them in files.
    for (auto& [k, v] : kv_) {
        if (k == key) {
            v = std::move(value);
            return;
        }
    }
    kv_.emplace_back(std::move(key), std::move(value));
}

void GGUFWriter::remove(std::string_view key) {
    std::erase_if(kv_, [&](const auto& kv) { return kv.first == key; });
}

void GGUFWriter::check_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                              size_t nbytes) const {
    SYSLM_CHECK(!name.empty() && name.size() <= kGGUFMaxTensorName, "GGUFWriter: tensor name '",
                name, "' must have 1..", kGGUFMaxTensorName, " bytes (llama.cpp's limit)");
    for (const auto& t : tensors_)
        SYSLM_CHECK(t.name != name, "GGUFWriter: duplicate tensor name '", name, "'");
    SYSLM_CHECK(!ne.empty() && ne.size() <= static_cast<size_t>(kGGUFMaxDims),
                "GGUFWriter: tensor '", name, "' has ", ne.size(), " dimensions (must be 1..",
                kGGUFMaxDims, ")");
    const DTypeInfo* info = dtype_info(static_cast<uint32_t>(type));
    SYSLM_CHECK(info && !info->runtime_only, "GGUFWriter: tensor '", name, "' has type id ",
                static_cast<uint32_t>(type), ", which is not a GGUF type");
    int64_t rows = 1;
    for (size_t d = 0; d < ne.size(); ++d) {
        SYSLM_CHECK(ne[d] > 0, "GGUFWriter: tensor '", name, "' dimension ", d, " is ", ne[d]);
        if (d > 0) {
            SYSLM_CHECK(rows <= std::numeric_limits<int64_t>::max() / ne[d], "GGUFWriter: tensor '",
                        name, "' element count overflows");
            rows *= ne[d];
        }
    }
    SYSLM_CHECK(ne[0] % info->block_size == 0, "GGUFWriter: tensor '", name, "' row length ", ne[0],
                " is not a multiple of the ", info->name, " block size ", info->block_size);
    const size_t expected = row_bytes(type, ne[0]) * static_cast<size_t>(rows);
    SYSLM_CHECK(nbytes == expected, "GGUFWriter: tensor '", name, "' has ", nbytes,
                " bytes of data, its shape and type need ", expected);
}

void GGUFWriter::add_tensor(std::string name, DType type, std::vector<int64_t> ne, const void* data,
                            size_t nbytes) {
    check_tensor(name, type, ne, nbytes);
    SYSLM_CHECK(data != nullptr, "GGUFWriter: tensor '", name, "' has no data");
    tensors_.push_back(Pending{std::move(name), type, std::move(ne), data, nbytes, nullptr, {}});
}

void GGUFWriter::add_tensor(std::string name, DType type, std::vector<int64_t> ne, size_t nbytes,
                            std::function<void(uint8_t* dst)> fill) {
    check_tensor(name, type, ne, nbytes);
    SYSLM_CHECK(fill != nullptr, "GGUFWriter: tensor '", name, "' has no data");
    tensors_.push_back(
        Pending{std::move(name), type, std::move(ne), nullptr, nbytes, nullptr, std::move(fill)});
}

void GGUFWriter::add_tensor(std::string name, DType type, std::vector<int64_t> ne,
                            std::vector<uint8_t> bytes) {
    auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    // A zero-byte vector has no storage; data is never read for it (add_tensor rejects it).
    const void* data = owned->empty() ? static_cast<const void*>(owned.get()) : owned->data();
    add_tensor(std::move(name), type, std::move(ne), data, owned->size());
    tensors_.back().owned = std::move(owned);
}

void GGUFWriter::write(const std::string& path) const {
    size_t alignment = kGGUFDefaultAlignment;
    for (const auto& [k, v] : kv_)
        if (k == "general.alignment") alignment = v.as_u32();  // validated by set()

    // Every tensor, the last included, is padded to the alignment (as gguf-py does).
    const std::vector<uint8_t> zeros(alignment, 0);
    AtomicFileWriter out(path);
    HeaderSink head(out);
    head.put<uint32_t>(0x46554747);  // "GGUF" read as a little-endian u32
    head.put<uint32_t>(kGGUFVersion);
    head.put<uint64_t>(tensors_.size());
    head.put<uint64_t>(kv_.size());
    for (const auto& [k, v] : kv_) {
        head.put_string(k);
        head.put(static_cast<uint32_t>(v.type()));
        put_value(head, v);
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        head.put_string(t.name);
        head.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
        for (int64_t d : t.ne) head.put<uint64_t>(static_cast<uint64_t>(d));
        head.put(static_cast<uint32_t>(t.type));
        head.put<uint64_t>(offset);
        offset = align_up(offset + t.nbytes, alignment);
    }
    const size_t head_size = head.size();
    head.put_bytes(zeros.data(), align_up(head_size, alignment) - head_size);
    head.flush();

    std::vector<uint8_t> scratch;  // for generated tensors, reused
    for (const auto& t : tensors_) {
        if (t.fill) {
            scratch.resize(t.nbytes);
            t.fill(scratch.data());
            out.write(scratch.data(), t.nbytes);
        } else {
            out.write(t.data, t.nbytes);
        }
        out.write(zeros.data(), align_up(t.nbytes, alignment) - t.nbytes);
    }
    out.commit();
}

}  // namespace syslm::io
