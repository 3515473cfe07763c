// The CPU backend: today's kernels (kernels/cpu), each choosing its ISA variant at run time, run
// by a thread pool the backend owns. Buffers are host memory.
#pragma once

#include <vector>
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
    void lora_update(const float* x, int64_t n_in, std::span<const kernels::LoraSegment> segments,
                     float* dots) override;
    void norm(kernels::NormKind k, const float* x, float* out, int64_t rows, int64_t dim,
              const float* weight, const float* bias, float eps) override;
    void ffn_activation(kernels::FfnActivation k, float* a, const float* b, int64_t n) override;
    void swish_beta_glu(float* a, const float* b, const float* beta, int64_t rows,
                        int64_t n_ff) override;
    void causal_conv(const float* a, const float* w, int k, int64_t B, int64_t T, int64_t dim,
                     float* out) override;
    void softcap(float* x, int64_t n, float cap) override;
    void softcap_backward(const float* y, float* dy, int64_t n, float cap) override;
    void rope_angles(const kernels::Rope& rope, std::span<const int64_t> positions,
                     float* angles) override;
    void rope_rows(const kernels::Rope& rope, const float* angles, int64_t seq_len,
                   const float* src, int64_t src_stride, float* dst, int64_t rows, int64_t heads,
                   int64_t head_dim) override;
    void attention(const kernels::AttentionShape& s, const float* q, const void* k_cache,
                   const void* v_cache, int64_t rows, int64_t n_past, float* out) override;
    void attention_paged(const kernels::AttentionShape& s,
                         std::span<const kernels::PagedSequence> seqs) override;
    void add(float* y, const float* x, int64_t n) override;
    void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                   int64_t rows, int64_t cols) override;
    void gather_rows(const float* src, std::span<const int64_t> rows, int64_t cols,
                     float* dst) override;
    void scatter_add_rows(const float* src, std::span<const int64_t> rows,
                          std::span<const float> scale, int64_t cols, float* dst) override;
    void gated_add(const float* h, const float* gate, const float* src, int64_t rows, int64_t dim,
                   float* dst) override;
    void embed_rows(DType type, const void* table, int64_t dim, std::span<const int64_t> ids,
                    float* dst, bool accumulate) override;

    // Training (cpu_backend_train.cpp).
    void linear(const float* x, const float* w, const float* bias, int64_t rows, int64_t n_in,
                int64_t n_out, float* y, const kernels::Rounding* rounding) override;
    void linear_backward_weight(const float* dy, const float* x, int64_t rows, int64_t n_in,
                                int64_t n_out, float* dw, float* db,
                                const kernels::Rounding* rounding) override;
    void linear_backward_input(const float* dy, const float* w, int64_t rows, int64_t n_in,
                               int64_t n_out, float* dx, bool accumulate,
                               const kernels::Rounding* rounding) override;
    void norm_backward(kernels::NormKind k, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, float* db, int64_t rows, int64_t dim,
                       float eps) override;
    void ffn_activation_backward(kernels::FfnActivation k, const float* a, const float* b,
                                 const float* dout, float* da, float* db, int64_t n) override;
    void causal_conv_backward(const float* a, const float* w, const float* dout, int k, int64_t B,
                              int64_t T, int64_t dim, float* da, float* dw) override;
    void swish_beta_glu_backward(const float* a, const float* b, const float* beta,
                                 const float* dout, float* da, float* db, float* dbeta,
                                 int64_t rows, int64_t n_ff) override;
    void attention_lse(const kernels::AttentionShape& s, const float* q, const float* k,
                       const float* v, int64_t rows, float* out, float* lse) override;
    void attention_backward(const kernels::AttentionShape& s, const float* q, const float* k,
                            const float* v, const float* o, const float* lse, const float* dout,
                            int64_t rows, float* dq, float* dk, float* dv) override;
    void hadamard_heads(float* x, int64_t rows, int64_t stride, int heads, int head_dim) override;
    void rope_rows_backward(const kernels::Rope& rope, const float* angles, int64_t seq_len,
                            float* dx, int64_t rows, int64_t heads, int64_t head_dim) override;
    double cross_entropy(float* logits, const int32_t* targets, int64_t rows, int64_t n_vocab,
                         float grad_scale) override;
    double distill_loss(float* logits, const float* teacher, const int32_t* targets, int64_t rows,
                        int64_t n_vocab, float alpha, float tau, float grad_scale) override;
    double distill_loss_topk(float* logits, const int32_t* teacher_ids, const float* teacher_logits,
                             int k, const int32_t* targets, int64_t rows, int64_t n_vocab,
                             float alpha, float tau, float grad_scale) override;
    void row_max(const float* x, int64_t rows, int64_t cols, float* out) override;
    void xent_sums(const float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                   int64_t col0, const float* max, double* sums) override;
    double xent_gradient(float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                         int64_t col0, const float* max, const double* sums, float inv) override;
    void embedding_backward(const int32_t* tokens, int64_t rows, const float* dx, float* dtable,
                            int64_t n_vocab, int64_t dim) override;
    void embedding_backward_range(const int32_t* tokens, int64_t rows, const float* dx,
                                  float* dtable, int64_t row0, int64_t n_rows,
                                  int64_t dim) override;
    void embed_rows_range(const float* table, int64_t dim, const int32_t* ids, int64_t rows,
                          int64_t row0, int64_t n_rows, float* dst) override;
    double hidden_state_loss(float* y, const float* teacher, int64_t rows, int64_t dim, double c,
                             float loss_scale) override;
    void moe_route_rows(float* probs, int64_t rows, int64_t n_expert, const kernels::MoeRouting& r,
                        int32_t* ids, float* weights, float* lse) override;
    void moe_combine(const MoeSlots& m, const float* eo, int64_t dim, float* out) override;
    void moe_slot_backward(const MoeSlots& m, const float* dy, const float* eo, const float* x,
                           int64_t dim, float* grad, float* dw, float* x_slots) override;
    void moe_router_backward(const MoeSlots& m, const float* probs, const float* d_in,
                             const float* dw, const float* aux_grad, bool renormalise, int64_t dim,
                             float* dx, float* dz) override;
    void optimizer_update(const UpdateStep& s, float* w, const float* g, float* m, float* v,
                          int64_t n) override;
    void scale(float* x, std::span<const Range> ranges, float s) override;
    std::array<double, 2> sum_squares(const float* g,
                                      std::span<const SquaresPiece> pieces) override;
    void round_trip(DType type, float* v, int64_t rows, int64_t n) override;
    void fill_zero(float* v, std::span<const Range> ranges) override;

private:
    ThreadPool pool_;
    std::vector<double> row_loss_;  // xent_gradient's per-row losses, summed in row order
};

}  // namespace syslm::backend
