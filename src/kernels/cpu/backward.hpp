// Backward passes of the element-wise and row-wise ops of the forward (norm.hpp,
// activations.hpp, rope.hpp) and the fused softmax + cross-entropy loss: what training needs
// besides the matmuls and attention. Each takes what the forward saw (its inputs, never its
// in-place outputs) and the gradient of the forward's output; parameter gradients are
// accumulated (+=) so micro-batches and tied uses add up. Sums along a row run in double, as
// the forward's do. Checked against finite differences (tests/kernels/backward_test.cpp) and,
// through whole models, against PyTorch autograd.
#pragma once

#include <cstdint>

#include "core/thread_pool.hpp"
#include "kernels/isa.hpp"

namespace syslm::kernels {

// y = x / sqrt(mean(x^2) + eps) * w: dx (overwritten; may be dy) and dw (+=) from dy.
void rms_norm_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                       int64_t rows, int64_t dim, float eps, ThreadPool& pool);

// y = (x - mean) / sqrt(var + eps) * w + b: dx (overwritten), dw and db (+=; db may be null).
void layer_norm_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                         float* db, int64_t rows, int64_t dim, float eps, ThreadPool& pool);

// out = silu(gate) * up: dgate and dup (overwritten) from dout.
void swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate,
                     float* dup, int64_t n, ThreadPool& pool);

// y = gelu_tanh(x): dx (overwritten) from dy.
void gelu_tanh_backward(const float* x, const float* dy, float* dx, int64_t n, ThreadPool& pool);
// y = gelu_erf(x): dx (overwritten) from dy.
void gelu_erf_backward(const float* x, const float* dy, float* dx, int64_t n, ThreadPool& pool);

// out = gelu_tanh(gate) * up: dgate and dup (overwritten) from dout.
void geglu_backward(const float* gate, const float* up, const float* dout, float* dgate, float* dup,
                    int64_t n, ThreadPool& pool);

// y = cap tanh(x / cap): dy *= 1 - (y / cap)^2 in place, from the forward's output y.
void softcap_backward(const float* y, float* dy, int64_t n, float cap, ThreadPool& pool);

// Token embedding rows gathered by `tokens`: dtable[tokens[t]] += dx[t] (rows of dim floats).
// Threads own disjoint ranges of the table, so no two write the same row.
void embedding_backward(const int32_t* tokens, int64_t n_tokens, const float* dx, float* dtable,
                        int64_t n_vocab, int64_t dim, ThreadPool& pool);

// Mean cross-entropy of softmax(logits) against targets over the rows whose target is >= 0
// (negative targets are ignored, as PyTorch's ignore_index); returns the loss and overwrites
// logits with its gradient (softmax - onehot) / n_counted, row by row, so the rows x n_vocab
// probabilities never exist beside the logits. Throws Error for a target >= n_vocab.
// grad_scale multiplies the gradient (FP16 training's loss scale), not the returned loss.
double cross_entropy_fused(float* logits, const int32_t* targets, int64_t rows, int64_t n_vocab,
                           ThreadPool& pool, float grad_scale = 1.0f);
// The same with the kernels of `isa` (the scalar one computes e^x in double): tests.
double cross_entropy_fused(float* logits, const int32_t* targets, int64_t rows, int64_t n_vocab,
                           ThreadPool& pool, Isa isa, float grad_scale = 1.0f);

// Knowledge distillation's loss (Hinton et al. 2015) over the rows whose target is >= 0:
//   alpha * tau^2 * KL(softmax(teacher / tau) || softmax(logits / tau)) + (1 - alpha) * CE
// averaged over those rows; returns it and overwrites logits with its gradient
//   (alpha * tau * (softmax(logits / tau) - softmax(teacher / tau))
//    + (1 - alpha) * (softmax(logits) - onehot)) * grad_scale / n_counted.
// teacher holds rows x n_vocab logits of the same vocabulary.
double distill_loss_fused(float* logits, const float* teacher, const int32_t* targets, int64_t rows,
                          int64_t n_vocab, float alpha, float tau, ThreadPool& pool,
                          float grad_scale = 1.0f);
// The same against a teacher known by its top-k logits per row (offline distillation): its
// distribution is the softmax at temperature tau over those k tokens, zero elsewhere.
double distill_loss_fused_topk(float* logits, const int32_t* teacher_ids,
                               const float* teacher_logits, int k, const int32_t* targets,
                               int64_t rows, int64_t n_vocab, float alpha, float tau,
                               ThreadPool& pool, float grad_scale = 1.0f);

}  // namespace syslm::kernels
