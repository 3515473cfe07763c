// The seam between the model's math (model/, infer/; train/ next, docs/design/backend.md) and the
// hardware that runs it. The layers call these operations on buffers the backend allocated; a
// backend owns whatever runs them (the CPU backend: the thread pool). A backend for another
// device implements the same operations with its own memory and kernels, and the model code
// does not change. Collectives stay in parallel/ (its Communicator has MPI and NCCL versions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>

#include "core/dtype.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/ffn_activation.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/rope.hpp"

namespace syslm::backend {

enum class Device { Host, Cuda };
const char* device_name(Device d);

// float memory on one device, from Backend::alloc; freed with the buffer. Only the host may
// dereference a Host buffer's data(); other devices' pointers go back to their backend's ops.
class Buffer {
public:
    Buffer() = default;
    Buffer(Device device, float* data, size_t size, std::function<void(float*)> release);
    Buffer(Buffer&&) noexcept = default;
    Buffer& operator=(Buffer&&) noexcept = default;
    Device device() const { return device_; }
    float* data() const { return data_.get(); }
    size_t size() const { return size_; }

private:
    Device device_ = Device::Host;
    std::unique_ptr<float, std::function<void(float*)>> data_;
    size_t size_ = 0;
};

// Rows are row-major; "rows x dim" means rows * dim floats. Every pointer is in the backend's
// device memory, except weights (WeightView: placed for the backend by model/weights) and the
// small host-side arguments (norm weights, index lists).
class Backend {
public:
    virtual ~Backend() = default;
    virtual Device device() const = 0;
    virtual int threads() const = 0;  // the workers an op may use (CPU); 1 elsewhere
    virtual Buffer alloc(size_t floats) = 0;

    // y (rows x w.n_out) = x (rows x w.n_in) W^T + bias (kernels/cpu/matmul.hpp).
    virtual void matmul(const kernels::WeightView& w, const float* x, int64_t rows, float* y,
                        const float* bias = nullptr) = 0;
    // The same over an input shared by several matrices (converted once per partner type).
    virtual void matmul(const kernels::WeightView& w, kernels::SharedActivations& x, float* y,
                        const float* bias = nullptr) = 0;
    virtual void matmul(std::initializer_list<kernels::MatmulOutput> outs,
                        kernels::SharedActivations& x) = 0;

    // out = norm(x) * weight (+ bias): RMSNorm, or LayerNorm with its bias (may be null).
    virtual void rms_norm(const float* x, float* out, int64_t rows, int64_t dim,
                          const float* weight, float eps) = 0;
    virtual void layer_norm(const float* x, float* out, int64_t rows, int64_t dim,
                            const float* weight, const float* bias, float eps) = 0;

    // The dense FFN's activation in place on a (n floats), with the gated ones' up in b.
    virtual void ffn_activation(kernels::FfnActivation k, float* a, const float* b, int64_t n) = 0;

    // RoPE: the angles of each position (rope.angle_floats() floats each), and rows of `heads`
    // heads rotated by them while copied from src (src_stride floats apart) to dst (packed).
    virtual void rope_angles(const kernels::Rope& rope, std::span<const int64_t> positions,
                             float* angles) = 0;
    virtual void rope_rows(const kernels::Rope& rope, const float* angles, const float* src,
                           int64_t src_stride, float* dst, int64_t rows, int64_t heads,
                           int64_t head_dim) = 0;

    // Causal attention of `rows` new rows (at positions n_past..) over a contiguous cache, or of
    // a serving step's rows over paged caches (kernels/cpu/attention.hpp).
    virtual void attention(const kernels::AttentionShape& s, const float* q, const void* k_cache,
                           const void* v_cache, int64_t rows, int64_t n_past, float* out) = 0;
    virtual void attention_paged(const kernels::AttentionShape& s, const float* q,
                                 const kernels::KvPagesView& kv, int64_t rows, int64_t n_past,
                                 float* out) = 0;

    // Elementwise and row movement, the loops the layers used to write inline.
    virtual void add(float* y, const float* x, int64_t n) = 0;  // y += x
    // dst (rows x cols, packed) = rows of src, src_stride floats apart.
    virtual void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t rows,
                           int64_t cols) = 0;
    // dst[i] = src[rows[i]] (cols floats each).
    virtual void gather_rows(const float* src, std::span<const int64_t> rows, int64_t cols,
                             float* dst) = 0;
    // dst[rows[i]] += scale[i] * src[i] (the MoE combine).
    virtual void scatter_add_rows(const float* src, std::span<const int64_t> rows,
                                  std::span<const float> scale, int64_t cols, float* dst) = 0;
    // dst (rows x dim) += sigmoid(h_r . gate) * src_r (a shared expert scaled by its gate).
    virtual void gated_add(const float* h, const float* gate, const float* src, int64_t rows,
                           int64_t dim, float* dst) = 0;
    // dst[i] (+)= the dim-element row ids[i] of a table stored in `type` (embeddings).
    virtual void embed_rows(DType type, const void* table, int64_t dim,
                            std::span<const int64_t> ids, float* dst, bool accumulate) = 0;
};

}  // namespace syslm::backend
