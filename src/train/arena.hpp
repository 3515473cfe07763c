// One block of memory for a training step's activations, planned once per (B, T). Every buffer
// is a typed view (Buf) at a 64-byte-aligned offset in it. A plan is one sequence of take()
// calls run twice: once measuring (no memory: the size is known before anything is allocated,
// which is how a batch size is chosen to fit a memory limit), once placing the views into the
// allocated block. Nothing is allocated inside a step.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>

namespace syslm::train {

template <typename T>
struct Buf {
    T* p = nullptr;
    size_t n = 0;
    T* data() const { return p; }
    size_t size() const { return n; }
    T& operator[](size_t i) const { return p[i]; }
    T* begin() const { return p; }
    T* end() const { return p + n; }
};

class ArenaLayout {
public:
    explicit ArenaLayout(std::byte* base = nullptr) : base_(base) {}  // nullptr: measure only
    bool placing() const { return base_ != nullptr; }
    template <typename T>
    void take(Buf<T>& b, size_t n) {
        offset_ = (offset_ + 63) / 64 * 64;
        if (base_) b = {reinterpret_cast<T*>(base_ + offset_), n};
        offset_ += n * sizeof(T);
    }
    size_t bytes() const { return offset_; }

private:
    std::byte* base_;
    size_t offset_ = 0;
};

// The block itself: 64-byte aligned, zero-filled.
class ArenaBlock {
public:
    std::byte* allocate(size_t bytes) {
        block_.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t(64))));
        std::memset(block_.get(), 0, bytes);
        return block_.get();
    }
    void release() { block_.reset(); }

private:
    struct Free {
        void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
    };
    std::unique_ptr<std::byte[], Free> block_;
};

}  // namespace syslm::train
