// libFuzzer target for the GGUF parser: any byte string must either parse or throw syslm::Error.
// Anything else (a crash, an ASan/UBSan report, a leak, another exception type such as
// std::bad_alloc from an unchecked length) is a bug. Every parsed value and tensor byte is
// touched so that a view pointing outside the input is caught by ASan.
#include <cstddef>
#include <cstdint>

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

void touch(const GGUFValue& v) {
    uint64_t acc = static_cast<uint64_t>(v.type());
    probe([&] { acc += v.as_u64(); });
    probe([&] { acc += static_cast<uint64_t>(v.as_i64()); });
    probe([&] { acc += v.as_u32(); });
    probe([&] { acc += static_cast<uint64_t>(v.as_i32()); });
    probe([&] { acc += static_cast<uint64_t>(v.as_f64() != 0); });
    probe([&] { acc += v.as_bool(); });
    probe([&] { acc += v.as_string().size(); });
    probe([&] { acc += v.as_strings().size(); });
    probe([&] { acc += v.as_f32s().size(); });
    probe([&] { acc += v.as_i32s().size(); });
    acc += v.to_display().size();
    if (v.is_array()) {
        acc += static_cast<uint64_t>(v.array_type()) + v.size();
        for (const auto& item : v.items()) touch(item);
    }
    g_sink = g_sink + acc;
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
        g_sink = g_sink + acc;
    } catch (const Error&) {
        // Rejected input: the expected outcome for most mutations.
    }
    return 0;
}
