// The CPU backend: today's kernels (kernels/cpu), each choosing its ISA variant at run time, run
// by a thread pool the backend owns. Buffers are host memory.
#pragma once

#include "backend/backend.hpp"
#include "core/thread_pool.hpp"

namespace syslm::backend {

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int n_threads);  // n_threads <= 0: every hardware thread

    Device device() const override { return Device::Host; }
    int threads() const override { return pool_.size(); }
    Buffer alloc(size_t floats) override;
    // The pool itself, for CPU-only code (kernel tests, calibration tools) that calls kernels/
    // directly; the layers go through the operations.
    ThreadPool& pool() { return pool_; }

    void matmul(const kernels::WeightView& w, const float* x, int64_t rows, float* y,
                const float* bias) override;
    void matmul(const kernels::WeightView& w, kernels::SharedActivations& x, float* y,
                const float* bias) override;
    void matmul(std::initializer_list<kernels::MatmulOutput> outs,
                kernels::SharedActivations& x) override;
    void rms_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                  float eps) override;
    void layer_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                    const float* bias, float eps) override;
    void ffn_activation(kernels::FfnActivation k, float* a, const float* b, int64_t n) override;
    void rope_angles(const kernels::Rope& rope, std::span<const int64_t> positions,
                     float* angles) override;
    void rope_rows(const kernels::Rope& rope, const float* angles, const float* src,
                   int64_t src_stride, float* dst, int64_t rows, int64_t heads,
                   int64_t head_dim) override;
    void attention(const kernels::AttentionShape& s, const float* q, const void* k_cache,
                   const void* v_cache, int64_t rows, int64_t n_past, float* out) override;
    void attention_paged(const kernels::AttentionShape& s, const float* q,
                         const kernels::KvPagesView& kv, int64_t rows, int64_t n_past,
                         float* out) override;
    void add(float* y, const float* x, int64_t n) override;
    void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t rows,
                   int64_t cols) override;
    void gather_rows(const float* src, std::span<const int64_t> rows, int64_t cols,
                     float* dst) override;
    void scatter_add_rows(const float* src, std::span<const int64_t> rows,
                          std::span<const float> scale, int64_t cols, float* dst) override;
    void gated_add(const float* h, const float* gate, const float* src, int64_t rows, int64_t dim,
                   float* dst) override;
    void embed_rows(DType type, const void* table, int64_t dim, std::span<const int64_t> ids,
                    float* dst, bool accumulate) override;

private:
    ThreadPool pool_;
};

}  // namespace syslm::backend
