// Keys (after RoPE) and values of every processed position, per layer: layer-major, then
// position, then kv_dim. Contiguous per layer so attention streams it. Elements are F16 (the
// default, as llama.cpp's: half the memory and half the bytes decode attention reads) or F32
// (exact: the reference tests against HF transformers use it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/hparams.hpp"

namespace syslm::model {

class KVCache {
public:
    KVCache(const HParams& hp, int n_ctx, DType type = DType::F16);

    int n_ctx() const { return n_ctx_; }
    int64_t kv_dim() const { return kv_dim_; }
    DType type() const { return type_; }
    // Layer il's rows from position 0, elements of type().
    const void* k(int il) const { return k_.data() + offset(il, 0); }
    const void* v(int il) const { return v_.data() + offset(il, 0); }
    // Writes one position's key and value rows (kv_dim floats each), converted to type().
    void store(int il, int64_t pos, const float* k, const float* v);
    size_t bytes() const { return k_.size() + v_.size(); }

private:
    size_t offset(int il, int64_t pos) const {
        return (static_cast<size_t>(il) * n_ctx_ + static_cast<size_t>(pos)) * kv_dim_ * elem_;
    }
    int n_ctx_;
    int64_t kv_dim_;
    DType type_;
    size_t elem_;
    std::vector<uint8_t> k_, v_;
};

// "f16" / "f32" (the names of --cache-type) to the type; throws Error naming the choices.
DType kv_cache_type(const std::string& name);

}  // namespace syslm::model
