#include "model/kv_cache.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::model {

KVCache::KVCache(const HParams& hp, int n_ctx, DType type, int n_batch)
    : n_ctx_(n_ctx), kv_dim_(hp.kv_dim()), type_(type), max_rollback_(n_ctx) {
    SYSLM_CHECK(n_ctx > 0, "context size must be positive, got ", n_ctx);
    SYSLM_CHECK(type == DType::F16 || type == DType::F32, "KV cache type ", dtype_name(type),
                " is not supported (f16 or f32)");
    elem_ = dtype_info(type).type_size;
    linear_.resize(static_cast<size_t>(hp.n_layer));
    // A batch of T stores positions up to n_past + T - 1 before its first token reads back to
    // n_past - w + 1, and a rollback leaves up to kRingRollback later positions stored: a ring
    // of w + max(T, rollback) - 1 rows never overwrites a row still to be read.
    // Global tokens stay before the ring, in whole pages of its view.
    const int64_t resident = (int64_t{hp.global_tokens} + kRingPage - 1) / kRingPage * kRingPage;
    size_t rows = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
        const int w = hp.window(il);
        int cap = n_ctx;
        // BigBird's random blocks reach back anywhere: their layers keep every position.
        if (n_batch > 0 && w > 0 && hp.random_blocks == 0) {
            const int64_t need = int64_t{w} + std::max(n_batch, kRingRollback) - 1;
            const int64_t ring = (need + kRingPage - 1) / kRingPage * kRingPage;
            if (resident + ring < n_ctx) {
                cap = static_cast<int>(resident + ring);
                resident_ = static_cast<int>(resident);
                max_rollback_ = std::min(max_rollback_, static_cast<int>(ring) - w + 1);
            }
        }
        cap_.push_back(cap);
        first_row_.push_back(rows);
        rows += static_cast<size_t>(cap);
    }
    const size_t n = rows * kv_dim_ * elem_;
    try {
        k_.resize(n);
        v_.resize(n);
    } catch (const std::bad_alloc&) {
        fail("cannot allocate the KV cache: ", 2 * n >> 20, " MiB for ", n_ctx,
             " positions; use a smaller context size");
    }
    if (hp.conv_kernel > 1) {  // lags read before the batch stores; a rollback keeps them
        embd_ = hp.n_embd;
        conv_cap_ = std::min(n_ctx, hp.conv_kernel - 1 + kRingRollback);
        max_rollback_ = std::min(max_rollback_, conv_cap_ - (hp.conv_kernel - 1));
        try {
            conv_.resize(static_cast<size_t>(hp.n_layer) * conv_cap_ * embd_ * elem_);
        } catch (const std::bad_alloc&) {
            fail("cannot allocate the conv rows of the KV cache");
        }
    }
    k_pages_.resize(cap_.size());
    v_pages_.resize(cap_.size());
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!ring(il)) continue;
        const int64_t kept = resident_ / kRingPage, ring_pages = capacity(il) / kRingPage - kept;
        for (int64_t j = 0; j * kRingPage < n_ctx; ++j) {
            const size_t at =
                offset(il, (j < kept ? j : kept + (j - kept) % ring_pages) * kRingPage);
            k_pages_[il].push_back(k_.data() + at);
            v_pages_[il].push_back(v_.data() + at);
        }
    }
}

kernels::KvPagesView KVCache::ring_view(int il) const {
    SYSLM_CHECK(ring(il), "KV cache: layer ", il, " keeps every position, not a ring");
    return {k_pages_[il].data(), v_pages_[il].data(), kRingPage};
}

void KVCache::store(int il, int64_t pos, const float* k, const float* v) {
    SYSLM_CHECK(pos >= 0 && pos < n_ctx_, "KV cache: position ", pos, " outside the context of ",
                n_ctx_);
    const int64_t row = ring(il) && pos >= resident_
                            ? resident_ + (pos - resident_) % (capacity(il) - resident_)
                            : pos;
    uint8_t* kd = k_.data() + offset(il, row);
    uint8_t* vd = v_.data() + offset(il, row);
    if (type_ == DType::F32) {
        std::memcpy(kd, k, kv_dim_ * sizeof(float));
        std::memcpy(vd, v, kv_dim_ * sizeof(float));
        return;
    }
    const kernels::TypeTraits& tt = kernels::type_traits(type_);
    tt.from_float_fast(k, kd, kv_dim_);
    tt.from_float_fast(v, vd, kv_dim_);
}

void KVCache::store_conv(int il, int64_t pos, const float* a) {
    SYSLM_CHECK(conv_cap_ > 0 && pos >= 0 && pos < n_ctx_, "KV cache: no conv row for position ",
                pos);
    uint8_t* d =
        conv_.data() + ((size_t(il) * conv_cap_ + size_t(pos % conv_cap_)) * embd_) * elem_;
    if (type_ == DType::F32)
        std::memcpy(d, a, embd_ * sizeof(float));
    else
        kernels::type_traits(type_).from_float_fast(a, d, embd_);
}

void KVCache::load_conv(int il, int64_t pos, float* dst) const {
    const uint8_t* s =
        conv_.data() + ((size_t(il) * conv_cap_ + size_t(pos % conv_cap_)) * embd_) * elem_;
    kernels::type_traits(type_).to_float(s, dst, embd_);
}

DType kv_cache_type(const std::string& name) {
    if (name == "f16") return DType::F16;
    if (name == "f32") return DType::F32;
    fail("cache type '", name, "': expected f16 (the default) or f32");
}

}  // namespace syslm::model
