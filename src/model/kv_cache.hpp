// Keys (after RoPE) and values of one sequence's processed positions, per layer: layer-major,
// then position, then kv_dim. Contiguous per layer so attention streams it. Elements are F16 (the
// default, as llama.cpp's: half the memory and half the bytes decode attention reads) or F32
// (exact: the reference tests against HF transformers use it).
//
// A layer with a sliding window w (HParams::window) needs only its last w positions: given the
// largest batch, it keeps a ring of w + max(n_batch, kRingRollback) - 1 rows rounded up to
// kRingPage (position p at ring row p % ring size), which attention reads through a page list
// whose pages alias the ring's rows (ring_view). With global tokens (HParams::global_tokens)
// the first resident() rows (the tokens, rounded up to whole pages) hold positions
// [0, resident) for good and the ring follows them (position p >= resident at row resident +
// (p - resident) % ring size). Global layers, and rings that would not save anything, keep
// every position. A conv hybrid's layers also keep their last attention-norm outputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/linear_attention.hpp"
#include "model/hparams.hpp"

namespace syslm::model {

// The element types of a KV cache's keys and values (llama.cpp's --cache-type-k / -v).
struct KvTypes {
    DType k = DType::F16, v = DType::F16;
    // Keys, values and queries rotated per head by the normalized Hadamard transform H before
    // the cache (the attention output rotated back: H is orthogonal and its own inverse), so
    // that a quantized cache sees outlier channels spread over the head. Needs a power-of-two
    // head size; not for linear-attention layers. Named with a "+h" suffix ("q4_0+h").
    bool hadamard = false;
    KvTypes() = default;
    KvTypes(DType both) : k(both), v(both) {}  // NOLINT: one type for both reads naturally
    KvTypes(DType k_type, DType v_type) : k(k_type), v(v_type) {}
    bool operator==(const KvTypes&) const = default;
    // A conv hybrid's kept rows (KVCache::store_conv): F32 with F32 keys, else F16.
    DType conv() const { return k == DType::F32 ? DType::F32 : DType::F16; }
    // Bytes of one position of one layer: its key and value rows of kv_dim elements.
    size_t row_bytes(int64_t kv_dim) const;
    std::string name() const;  // "f16", or "q8_0/q4_0" when K and V differ
};

// Throws Error unless the model can keep its K/V in these types: a block type's blocks must not
// straddle a head (head_dim a multiple of 32 for the Q types).
void check_kv_types(const HParams& hp, KvTypes types);
// A row of n floats as a cache of `type` keeps it (F32 copied, else converted with the type's
// fast quantizer): the one conversion every cache (KVCache, the engine's pages) uses.
void store_kv_row(DType type, const float* src, void* dst, int64_t n);

class KVCache {
public:
    // n_batch: the most positions one forward stores before it attends (0: no rings).
    KVCache(const HParams& hp, int n_ctx, KvTypes types = {}, int n_batch = 0);

    int n_ctx() const { return n_ctx_; }
    int64_t kv_dim() const { return kv_dim_; }
    KvTypes types() const { return types_; }
    // Rows layer il keeps: n_ctx, or its ring's size.
    int capacity(int il) const { return cap_[static_cast<size_t>(il)]; }
    bool ring(int il) const { return capacity(il) < n_ctx_; }
    // How far truncate may roll back while every ring still holds the windows read next.
    int max_rollback() const { return max_rollback_; }
    // Layer il's rows from position 0 (not a ring), elements of types().k / .v.
    const void* k(int il) const { return k_.data() + k_offset(il, 0); }
    const void* v(int il) const { return v_.data() + v_offset(il, 0); }
    // A ring layer's rows as pages of kRingPage positions: page j holds positions
    // [j kRingPage, (j + 1) kRingPage) as long as they are within the ring's reach.
    kernels::KvPagesView ring_view(int il) const;
    // Positions a ring layer keeps for good before its ring (global tokens; 0: none).
    int resident() const { return resident_; }
    // Writes one position's key and value rows (kv_dim floats each), converted to types().
    void store(int il, int64_t pos, const float* k, const float* v);
    // Conv hybrids: a ring of the last conv_capacity() positions' attention-norm outputs per
    // layer (n_embd elements of types().conv()), enough for the kernel's k - 1 lags after a
    // rollback.
    int conv_capacity() const { return conv_cap_; }
    void store_conv(int il, int64_t pos, const float* a);
    // Position pos's row widened into dst (n_embd floats); pos must be one of the last kept.
    void load_conv(int il, int64_t pos, float* dst) const;
    size_t bytes() const { return k_.size() + v_.size() + conv_.size(); }
    // A linear-attention layer's recurrent state over this cache's rows (the kernel keeps it in
    // step with the positions it is called at).
    kernels::LinearState& linear_state(int il) { return linear_[static_cast<size_t>(il)]; }

    static constexpr int kRingPage = 64;      // positions per page of a ring's view
    static constexpr int kRingRollback = 64;  // what a ring keeps for truncate (speculation)

private:
    // Bytes from the start of k_ (v_) to layer il's row `row`.
    size_t k_offset(int il, int64_t row) const { return rows_before(il, row) * k_row_; }
    size_t v_offset(int il, int64_t row) const { return rows_before(il, row) * v_row_; }
    size_t rows_before(int il, int64_t row) const {
        return first_row_[static_cast<size_t>(il)] + static_cast<size_t>(row);
    }
    int n_ctx_;
    int64_t kv_dim_;
    KvTypes types_;
    size_t k_row_, v_row_, conv_elem_;  // bytes of a key row, a value row, a conv element
    std::vector<int> cap_;
    std::vector<size_t> first_row_;  // of each layer in k_ / v_
    int max_rollback_;
    int resident_ = 0;
    int64_t embd_ = 0;
    int conv_cap_ = 0;
    std::vector<uint8_t> k_, v_, conv_;
    std::vector<std::vector<const void*>> k_pages_, v_pages_;  // per ring layer, else empty
    std::vector<kernels::LinearState> linear_;                 // per layer (used by linear ones)
};

// A cache type's name as llama.cpp's --cache-type-k / -v take it (f32, f16, bf16, q8_0, q4_0,
// q4_1, q5_0, q5_1) to the type; throws Error naming the choices.
DType kv_cache_type(const std::string& name);
std::string kv_cache_type_name(DType t);  // the inverse; throws Error for other types
// KvTypes::name()'s form ("q8_0", or "q8_0/q4_0" for keys then values, "+h" for the Hadamard
// rotation) to the types.
KvTypes kv_types_from_name(const std::string& name);
// The names kv_cache_type accepts.
const std::vector<std::string>& kv_cache_type_names();

}  // namespace syslm::model
