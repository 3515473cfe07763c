#include "model/kv_cache.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::model {

namespace {

struct NamedType {
    const char* name;
    DType type;
};
// llama.cpp's cache types that syslm has kernels for (not IQ4_NL).
constexpr NamedType kCacheTypes[] = {
    {"f32", DType::F32},   {"f16", DType::F16},   {"bf16", DType::BF16}, {"q8_0", DType::Q8_0},
    {"q4_0", DType::Q4_0}, {"q4_1", DType::Q4_1}, {"q5_0", DType::Q5_0}, {"q5_1", DType::Q5_1}};

}  // namespace

std::string kv_cache_type_name(DType t) {
    for (const NamedType& n : kCacheTypes)
        if (n.type == t) return n.name;
    fail("KV cache type ", dtype_name(t), " is not supported");
}

size_t KvTypes::row_bytes(int64_t kv_dim) const {
    return syslm::row_bytes(k, kv_dim) + syslm::row_bytes(v, kv_dim);
}

std::string KvTypes::name() const {
    std::string n = kv_cache_type_name(k);
    if (v != k) n.append("/").append(kv_cache_type_name(v));
    return hadamard ? n.append("+h") : n;
}

void store_kv_row(DType type, const float* src, void* dst, int64_t n) {
    if (type == DType::F32)
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    else
        kernels::type_traits(type).from_float_fast(src, dst, n);
}

void check_kv_types(const HParams& hp, KvTypes types) {
    SYSLM_CHECK(!types.hadamard || (hp.head_dim & (hp.head_dim - 1)) == 0,
                "the Hadamard-rotated KV cache needs a power-of-two head size, and this model's "
                "heads have ",
                hp.head_dim);
    for (const DType t : {types.k, types.v}) {
        const std::string name = kv_cache_type_name(t);  // throws for other types
        const int64_t block = dtype_info(t).block_size;
        SYSLM_CHECK(hp.head_dim % block == 0, "KV cache type ", name, " packs ", block,
                    " elements per block, and this model's heads have ", hp.head_dim,
                    " (not a multiple): use f16, bf16 or f32");
    }
}

KVCache::KVCache(const HParams& hp, int n_ctx, KvTypes types, int n_batch)
    : n_ctx_(n_ctx), kv_dim_(hp.kv_dim()), types_(types), max_rollback_(n_ctx) {
    SYSLM_CHECK(n_ctx > 0, "context size must be positive, got ", n_ctx);
    check_kv_types(hp, types);
    k_row_ = row_bytes(types.k, kv_dim_);
    v_row_ = row_bytes(types.v, kv_dim_);
    conv_elem_ = dtype_info(types.conv()).type_size;
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
    try {
        k_.resize(rows * k_row_);
        v_.resize(rows * v_row_);
    } catch (const std::bad_alloc&) {
        fail("cannot allocate the KV cache: ", (rows * (k_row_ + v_row_)) >> 20, " MiB for ", n_ctx,
             " positions; use a smaller context size or a smaller cache type");
    }
    if (hp.conv_kernel > 1) {  // lags read before the batch stores; a rollback keeps them
        embd_ = hp.n_embd;
        conv_cap_ = std::min(n_ctx, hp.conv_kernel - 1 + kRingRollback);
        max_rollback_ = std::min(max_rollback_, conv_cap_ - (hp.conv_kernel - 1));
        try {
            conv_.resize(static_cast<size_t>(hp.n_layer) * conv_cap_ * embd_ * conv_elem_);
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
            const int64_t row = (j < kept ? j : kept + (j - kept) % ring_pages) * kRingPage;
            k_pages_[il].push_back(k_.data() + k_offset(il, row));
            v_pages_[il].push_back(v_.data() + v_offset(il, row));
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
    store_kv_row(types_.k, k, k_.data() + k_offset(il, row), kv_dim_);
    store_kv_row(types_.v, v, v_.data() + v_offset(il, row), kv_dim_);
}

void KVCache::store_conv(int il, int64_t pos, const float* a) {
    SYSLM_CHECK(conv_cap_ > 0 && pos >= 0 && pos < n_ctx_, "KV cache: no conv row for position ",
                pos);
    store_kv_row(
        types_.conv(), a,
        conv_.data() + ((size_t(il) * conv_cap_ + size_t(pos % conv_cap_)) * embd_) * conv_elem_,
        embd_);
}

void KVCache::load_conv(int il, int64_t pos, float* dst) const {
    const uint8_t* s =
        conv_.data() + ((size_t(il) * conv_cap_ + size_t(pos % conv_cap_)) * embd_) * conv_elem_;
    kernels::type_traits(types_.conv()).to_float(s, dst, embd_);
}

DType kv_cache_type(const std::string& name) {
    for (const NamedType& n : kCacheTypes)
        if (name == n.name) return n.type;
    std::string names;
    for (const NamedType& n : kCacheTypes) names += std::string(names.empty() ? "" : ", ") + n.name;
    fail("cache type '", name, "': expected one of ", names, " (f16 is the default)");
}

KvTypes kv_types_from_name(const std::string& name) {
    const bool h = name.ends_with("+h");
    const std::string types = h ? name.substr(0, name.size() - 2) : name;
    const size_t slash = types.find('/');
    KvTypes t = slash == std::string::npos ? KvTypes(kv_cache_type(types))
                                           : KvTypes(kv_cache_type(types.substr(0, slash)),
                                                     kv_cache_type(types.substr(slash + 1)));
    t.hadamard = h;
    return t;
}

const std::vector<std::string>& kv_cache_type_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const NamedType& n : kCacheTypes) v.emplace_back(n.name);
        return v;
    }();
    return names;
}

}  // namespace syslm::model
