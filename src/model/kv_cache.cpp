#include "model/kv_cache.hpp"

#include <cstring>
#include <string>

#include "core/error.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::model {

KVCache::KVCache(const HParams& hp, int n_ctx, DType type)
    : n_ctx_(n_ctx), kv_dim_(hp.kv_dim()), type_(type) {
    SYSLM_CHECK(n_ctx > 0, "context size must be positive, got ", n_ctx);
    SYSLM_CHECK(type == DType::F16 || type == DType::F32, "KV cache type ", dtype_name(type),
                " is not supported (f16 or f32)");
    elem_ = dtype_info(type).type_size;
    const size_t n = static_cast<size_t>(hp.n_layer) * n_ctx * kv_dim_ * elem_;
    try {
        k_.resize(n);
        v_.resize(n);
    } catch (const std::bad_alloc&) {
        fail("cannot allocate the KV cache: ", 2 * n >> 20, " MiB for ", n_ctx,
             " positions; use a smaller context size");
    }
}

void KVCache::store(int il, int64_t pos, const float* k, const float* v) {
    SYSLM_CHECK(pos >= 0 && pos < n_ctx_, "KV cache: position ", pos, " outside the context of ",
                n_ctx_);
    uint8_t* kd = k_.data() + offset(il, pos);
    uint8_t* vd = v_.data() + offset(il, pos);
    if (type_ == DType::F32) {
        std::memcpy(kd, k, kv_dim_ * sizeof(float));
        std::memcpy(vd, v, kv_dim_ * sizeof(float));
        return;
    }
    const kernels::TypeTraits& tt = kernels::type_traits(type_);
    tt.from_float_fast(k, kd, kv_dim_);
    tt.from_float_fast(v, vd, kv_dim_);
}

DType kv_cache_type(const std::string& name) {
    if (name == "f16") return DType::F16;
    if (name == "f32") return DType::F32;
    fail("cache type '", name, "': expected f16 (the default) or f32");
}

}  // namespace syslm::model
