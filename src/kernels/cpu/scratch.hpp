// Grow-only, 64-byte-aligned scratch memory, one per thread (thread_local) in the GEMMs: no
// allocation per call once warm. Internal linkage, so an ISA file's copy never serves others.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace syslm::kernels {
namespace {

struct Scratch {
    struct Free {
        void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
    };
    std::unique_ptr<std::byte[], Free> data;
    size_t size = 0;
    template <typename T>
    T* get(size_t n) {
        const size_t bytes = n * sizeof(T);
        if (bytes > size) {
            data.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t(64))));
            size = bytes;
        }
        return reinterpret_cast<T*>(data.get());
    }
};

}  // namespace
}  // namespace syslm::kernels
