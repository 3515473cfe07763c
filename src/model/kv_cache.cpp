#include "model/kv_cache.hpp"

#include "core/error.hpp"

namespace syslm::model {

KVCache::KVCache(const HParams& hp, int n_ctx) : n_ctx_(n_ctx), kv_dim_(hp.kv_dim()) {
    SYSLM_CHECK(n_ctx > 0, "context size must be positive, got ", n_ctx);
    const size_t n = static_cast<size_t>(hp.n_layer) * n_ctx * kv_dim_;
    try {
        k_.resize(n);
        v_.resize(n);
    } catch (const std::bad_alloc&) {
        fail("cannot allocate the KV cache: ", 2 * n * sizeof(float) >> 20, " MiB for ", n_ctx,
             " positions; use a smaller context size");
    }
}

}  // namespace syslm::model
