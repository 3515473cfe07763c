// The seam between the model's math (model/, infer/; train/ next, docs/design/backend.md) and the
// hardware that runs it. The layers call these operations on buffers the backend allocated; a
// backend owns whatever runs them (the CPU backend: the thread pool). A backend for another
// device implements the same operations with its own memory and kernels, and the model code
// does not change. Collectives stay in parallel/ (its Communicator has MPI and NCCL versions).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>

#include "core/dtype.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/ffn_activation.hpp"
#include "kernels/cpu/linear_backward.hpp"
#include "kernels/cpu/lora.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/moe_routing.hpp"
#include "kernels/cpu/norm.hpp"
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

    // y[i] += s B (A x[i]) for each LoRA segment's rows i, into the segment's own y
    // (kernels/cpu/lora.hpp); dots: scratch of sum(r x rows) floats.
    virtual void lora_update(const float* x, int64_t n_in,
                             std::span<const kernels::LoraSegment> segments, float* dots) = 0;

    // out = norm(x) * weight (+ bias): RMSNorm, or LayerNorm with its bias (may be null).
    virtual void norm(kernels::NormKind k, const float* x, float* out, int64_t rows, int64_t dim,
                      const float* weight, const float* bias, float eps) = 0;

    // The dense FFN's activation in place on a (n floats), with the gated ones' up in b.
    virtual void ffn_activation(kernels::FfnActivation k, float* a, const float* b, int64_t n) = 0;
    // Conv hybrids' causal depthwise convolution over B sequences of T rows of dim channels,
    // k taps per channel (kernels/cpu/causal_conv.hpp); out must not alias a.
    virtual void causal_conv(const float* a, const float* w, int k, int64_t B, int64_t T,
                             int64_t dim, float* out) = 0;
    // Swish-beta GLU on rows x n_ff (a = a sigmoid(beta a) b, beta per channel: kernels/cpu/
    // ffn_activation.hpp), instead of the architecture's SwiGLU where a model learns beta.
    virtual void swish_beta_glu(float* a, const float* b, const float* beta, int64_t rows,
                                int64_t n_ff) = 0;
    // x = cap tanh(x / cap) in place (Gemma 2's soft-capped logits), and its backward from the
    // capped values y: dy *= 1 - (y / cap)^2.
    virtual void softcap(float* x, int64_t n, float cap) = 0;
    virtual void softcap_backward(const float* y, float* dy, int64_t n, float cap) = 0;

    // RoPE: the angles of each position (rope.angle_floats() floats each), and rows of `heads`
    // heads rotated while copied from src (src_stride floats apart) to dst (packed); row t takes
    // the angles of row t % seq_len (a batch of sequences shares one sequence's angles).
    virtual void rope_angles(const kernels::Rope& rope, std::span<const int64_t> positions,
                             float* angles) = 0;
    virtual void rope_rows(const kernels::Rope& rope, const float* angles, int64_t seq_len,
                           const float* src, int64_t src_stride, float* dst, int64_t rows,
                           int64_t heads, int64_t head_dim) = 0;
    // Each head of each row (rows `stride` apart) rotated in place by the normalized Hadamard
    // transform (kernels/cpu/hadamard.hpp): the Hadamard-rotated KV cache.
    virtual void hadamard_heads(float* x, int64_t rows, int64_t stride, int heads,
                                int head_dim) = 0;

    // Causal attention of `rows` new rows (at positions n_past..) over a contiguous cache, or of
    // a serving step's rows over paged caches (kernels/cpu/attention.hpp).
    virtual void attention(const kernels::AttentionShape& s, const float* q, const void* k_cache,
                           const void* v_cache, int64_t rows, int64_t n_past, float* out) = 0;
    virtual void attention_paged(const kernels::AttentionShape& s,
                                 std::span<const kernels::PagedSequence> seqs) = 0;

    // Elementwise and row movement, the loops the layers used to write inline.
    virtual void add(float* y, const float* x, int64_t n) = 0;  // y += x
    // rows of cols floats from src (src_stride apart) to dst (dst_stride apart).
    virtual void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                           int64_t rows, int64_t cols) = 0;
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

    // ---- Training (train/train_model.cpp, train/moe.cpp): forward pieces and their backward.
    // Parameter gradients are accumulated (+=); `rounding` null: f32, else both operands of the
    // linear layers rounded to bf16 / f16 (kernels/cpu/linear_backward.hpp).
    virtual void linear(const float* x, const float* w, const float* bias, int64_t rows,
                        int64_t n_in, int64_t n_out, float* y,
                        const kernels::Rounding* rounding) = 0;
    virtual void linear_backward_weight(const float* dy, const float* x, int64_t rows, int64_t n_in,
                                        int64_t n_out, float* dw, float* db,
                                        const kernels::Rounding* rounding) = 0;
    virtual void linear_backward_input(const float* dy, const float* w, int64_t rows, int64_t n_in,
                                       int64_t n_out, float* dx, bool accumulate,
                                       const kernels::Rounding* rounding) = 0;
    // norm's backward: dx from dy (RMSNorm's dx may be dy), dw (and LayerNorm's db) accumulated.
    virtual void norm_backward(kernels::NormKind k, const float* x, const float* w, const float* dy,
                               float* dx, float* dw, float* db, int64_t rows, int64_t dim,
                               float eps) = 0;
    virtual void ffn_activation_backward(kernels::FfnActivation k, const float* a, const float* b,
                                         const float* dout, float* da, float* db, int64_t n) = 0;
    // da overwritten, dw (k x dim) accumulated.
    virtual void causal_conv_backward(const float* a, const float* w, const float* dout, int k,
                                      int64_t B, int64_t T, int64_t dim, float* da, float* dw) = 0;
    // da, db overwritten; dbeta (n_ff) accumulated.
    virtual void swish_beta_glu_backward(const float* a, const float* b, const float* beta,
                                         const float* dout, float* da, float* db, float* dbeta,
                                         int64_t rows, int64_t n_ff) = 0;
    // Causal attention of one sequence from position 0 with each row's log-sum-exp (lse, per
    // row and head), and its backward from those.
    virtual void attention_lse(const kernels::AttentionShape& s, const float* q, const float* k,
                               const float* v, int64_t rows, float* out, float* lse) = 0;
    virtual void attention_backward(const kernels::AttentionShape& s, const float* q,
                                    const float* k, const float* v, const float* o,
                                    const float* lse, const float* dout, int64_t rows, float* dq,
                                    float* dk, float* dv) = 0;
    // RoPE's backward in place on rows of gradients (row t uses angles row t % seq_len).
    virtual void rope_rows_backward(const kernels::Rope& rope, const float* angles, int64_t seq_len,
                                    float* dx, int64_t rows, int64_t heads, int64_t head_dim) = 0;
    // The fused losses (kernels/cpu/backward.hpp): the loss, logits overwritten by its gradient.
    virtual double cross_entropy(float* logits, const int32_t* targets, int64_t rows,
                                 int64_t n_vocab, float grad_scale) = 0;
    virtual double distill_loss(float* logits, const float* teacher, const int32_t* targets,
                                int64_t rows, int64_t n_vocab, float alpha, float tau,
                                float grad_scale) = 0;
    virtual double distill_loss_topk(float* logits, const int32_t* teacher_ids,
                                     const float* teacher_logits, int k, const int32_t* targets,
                                     int64_t rows, int64_t n_vocab, float alpha, float tau,
                                     float grad_scale) = 0;
    // The vocabulary-parallel cross-entropy's passes over this rank's columns [col0, col0 +
    // cols) of the vocabulary; the caller all-reduces between them: each row's maximum; each
    // row's sum of exp(z - max) and its target's logit (0 where another rank holds it); then the
    // gradient (scale / counted rows) written over the logits, returning the rows' summed loss.
    virtual void row_max(const float* x, int64_t rows, int64_t cols, float* out) = 0;
    virtual void xent_sums(const float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                           int64_t col0, const float* max, double* sums) = 0;
    virtual double xent_gradient(float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                                 int64_t col0, const float* max, const double* sums, float inv) = 0;
    // Embedding tables' gradients: dtable[tokens[r]] += dx[r], over the whole vocabulary or over
    // the rows [row0, row0 + n_rows) one rank holds.
    virtual void embedding_backward(const int32_t* tokens, int64_t rows, const float* dx,
                                    float* dtable, int64_t n_vocab, int64_t dim) = 0;
    virtual void embedding_backward_range(const int32_t* tokens, int64_t rows, const float* dx,
                                          float* dtable, int64_t row0, int64_t n_rows,
                                          int64_t dim) = 0;
    // dst[r] = table row ids[r] - row0 where this rank holds it ([0, n_rows)), else zeros.
    virtual void embed_rows_range(const float* table, int64_t dim, const int32_t* ids, int64_t rows,
                                  int64_t row0, int64_t n_rows, float* dst) = 0;
    // Distillation's hidden-state term: y -= teacher row by row; returns sum_r |y_r|^2 / |t_r|^2
    // and scales each row to its gradient, y_r *= 2 * c * loss_scale / |t_r|^2.
    virtual double hidden_state_loss(float* y, const float* teacher, int64_t rows, int64_t dim,
                                     double c, float loss_scale) = 0;

    // MoE (train/moe.cpp): each row's experts from its router probabilities
    // (kernels/cpu/moe_routing: top-k, or top-p between k_min and k_max; ids / weights rows x
    // k_max, -1 / 0 for choices left out; lse per row, if not null); the experts' outputs
    // combined per row; per slot the gradient of the expert's output and of its weight (and the
    // expert's input gathered again); per row the expert inputs' gradients summed and the router
    // logits' gradient.
    virtual void moe_route_rows(float* probs, int64_t rows, int64_t n_expert,
                                const kernels::MoeRouting& r, int32_t* ids, float* weights,
                                float* lse) = 0;
    struct MoeSlots {  // one layer's routing; slots grouped by expert, rows in order within one
        int64_t rows, k, n_expert;
        const int32_t* route_slot;    // rows x k: each choice's slot, -1 where top-p chose none
        const int32_t* slot_row;      // per slot: its row
        const float* slot_w;          // per slot: its weight
        const int64_t* expert_begin;  // n_expert + 1 slot offsets
    };
    virtual void moe_combine(const MoeSlots& m, const float* eo, int64_t dim, float* out) = 0;
    virtual void moe_slot_backward(const MoeSlots& m, const float* dy, const float* eo,
                                   const float* x, int64_t dim, float* grad, float* dw,
                                   float* x_slots) = 0;
    virtual void moe_router_backward(const MoeSlots& m, const float* probs, const float* d_in,
                                     const float* dw, const float* aux_grad, bool renormalise,
                                     int64_t dim, float* dx, float* dz) = 0;

    // ---- The optimizer and the gradients' housekeeping (train/trainer.cpp, optimizer.cpp).
    using Range = std::pair<size_t, size_t>;  // [begin, end) of a parameter arena
    enum class UpdateRule { AdamW, Lion, Sgd };
    struct UpdateStep {
        UpdateRule rule;
        float lr, weight_decay, b1, b2, eps;
        float step_size, bc2_sqrt;  // AdamW: lr / (1 - b1^t), sqrt(1 - b2^t)
        float grad_scale;           // the gradient is g * grad_scale (clipping, fused)
        float momentum;             // SGD
        bool nesterov, first_step;  // SGD (its buffer starts as the first gradient)
    };
    // One segment's update in place: weights w, gradients g, state m (and v for AdamW), as
    // torch.optim's AdamW, SGD and the Lion paper write them.
    virtual void optimizer_update(const UpdateStep& s, float* w, const float* g, float* m, float* v,
                                  int64_t n) = 0;
    // x *= s over each range.
    virtual void scale(float* x, std::span<const Range> ranges, float s) = 0;
    // Sums of g^2 over pieces of two classes (a piece: {begin, end, class 0 or 1}), in double.
    struct SquaresPiece {
        size_t b, e;
        int cls;
    };
    virtual std::array<double, 2> sum_squares(const float* g,
                                              std::span<const SquaresPiece> pieces) = 0;
    // Each of `rows` rows of n values rounded through a storage type and back (QAT).
    virtual void round_trip(DType type, float* v, int64_t rows, int64_t n) = 0;
    // Zeros over each range (a pruned model's kept zeros).
    virtual void fill_zero(float* v, std::span<const Range> ranges) = 0;
};

}  // namespace syslm::backend
