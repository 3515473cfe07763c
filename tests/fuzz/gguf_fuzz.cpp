// libFuzzer target for the GGUF parser: any byte string must either parse or throw syslm::Error.
// Anything else (a crash, an ASan/UBSan report, a leak, another exception type such as
// std::bad_alloc from an unchecked length) is a bug. Every parsed value and tensor byte is
// touched so that a view pointing outside the input is caught by ASan. Strings and arrays are
// views of the input: every element is visited in order (for_each_item) and through the sparse
// index (item(i)), and both must agree; so must a copy written by GGUFWriter and read back.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/gguf.hpp"

namespace {

using syslm::Error;
using syslm::io::GGUFValue;

volatile uint64_t g_sink;  // keeps the reads from being optimised away

template <class F>
void probe(F&& f) {
    try {
        f();
    } catch (const Error&) {
        // Type mismatches are expected on random input.
    }
}

// Two decodings of the same element: same type, and the same view (or the same scalar).
bool same(const GGUFValue& a, const GGUFValue& b) {
    if (a.type() != b.type() || a.size() != b.size()) return false;
    if (a.is_array())
        return a.array_type() == b.array_type() &&
               a.array_bytes().data() == b.array_bytes().data() &&
               a.array_bytes().size() == b.array_bytes().size();
    if (a.type() == syslm::io::GGUFType::STRING)
        return a.as_string_view().data() == b.as_string_view().data() &&
               a.as_string_view().size() == b.as_string_view().size();
    return a.to_display() == b.to_display();
}

void touch(const GGUFValue& v) {
    uint64_t acc = static_cast<uint64_t>(v.type());
    probe([&] { acc += v.as_u64(); });
    probe([&] { acc += static_cast<uint64_t>(v.as_i64()); });
    probe([&] { acc += v.as_u32(); });
    probe([&] { acc += static_cast<uint64_t>(v.as_i32()); });
    probe([&] { acc += static_cast<uint64_t>(v.as_f64() != 0); });
    probe([&] { acc += v.as_bool(); });
    probe([&] {
        const std::string_view s = v.as_string_view();
        for (char c : s) acc += static_cast<unsigned char>(c);
        if (v.as_string() != s) __builtin_trap();
    });
    probe([&] { acc += v.as_strings().size(); });
    probe([&] { acc += v.as_f32s().size(); });
    probe([&] { acc += v.as_i32s().size(); });
    acc += v.to_display().size();
    if (v.is_array()) {
        acc += static_cast<uint64_t>(v.array_type()) + v.size();
        for (uint8_t b : v.array_bytes()) acc += b;
        // Every element in order, and by index (all of a short array, a sample of a long one:
        // item(i) rescans up to kIndexStride - 1 siblings each time).
        const size_t step = v.size() <= 64 ? 1 : v.size() / 16 + 1;
        v.for_each_item([&](size_t i, const GGUFValue& item) {
            touch(item);
            if ((i % step == 0 || i + 1 == v.size()) && !same(v.item(i), item)) __builtin_trap();
        });
        probe([&] { v.item(v.size()); });  // out of range: an Error
    }
    g_sink = g_sink + acc;
}

// Rebuilding a (short) array from its items re-encodes it in memory: the bytes must equal the
// file's, which GGUFWriter writes verbatim.
void rebuild_and_compare(const syslm::io::GGUFFile& f) {
    for (const auto& kv : f.metadata()) {
        const GGUFValue& v = kv.second;
        if (v.is_array() && v.size() <= 64) {
            std::vector<GGUFValue> items;
            v.for_each_item([&](size_t, const GGUFValue& item) { items.push_back(item); });
            const GGUFValue copy = GGUFValue::array(v.array_type(), items);
            const auto a = v.array_bytes(), b = copy.array_bytes();
            if (a.size() != b.size() || (a.size() && std::memcmp(a.data(), b.data(), a.size())))
                __builtin_trap();
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const syslm::io::GGUFFile f(std::span<const uint8_t>(data, size), "fuzz.gguf");
        uint64_t acc = f.version() + f.alignment() + f.data_offset() + f.file_size();
        for (const auto& kv : f.metadata()) {
            const std::string& key = kv.first;  // clang 14 cannot capture structured bindings
            acc += key.size();
            touch(kv.second);
            if (f.find(key) == nullptr) __builtin_trap();  // every key must be findable
            probe([&] { acc += f.get_string(key).size(); });
            probe([&] { acc += f.get_u32(key); });
            probe([&] { acc += static_cast<uint64_t>(f.get_f32(key) != 0); });
            probe([&] { acc += f.get_bool(key); });
        }
        for (const auto& t : f.tensors()) {
            acc += static_cast<uint64_t>(t.numel() + t.rows()) + t.offset + t.nbytes;
            for (size_t i = 0; i < t.nbytes; ++i) acc += t.data[i];
            if (&f.tensor(t.name) != &t) __builtin_trap();  // names are unique
        }
        rebuild_and_compare(f);
        g_sink = g_sink + acc;
    } catch (const Error&) {
        // Rejected input: the expected outcome for most mutations.
    }
    return 0;
}
