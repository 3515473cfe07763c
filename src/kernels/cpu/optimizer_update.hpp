// The element-wise AdamW update (train/optimizer.hpp runs it per parameter tensor), with run-time
// ISA dispatch: it streams the weights, gradients and both moments once per step, and its square
// root and division per element make the scalar loop compute-bound (measured 0.4 s per step of
// the 124M model, 21% of the step). Every variant uses the same IEEE operations in the same order
// as the scalar one (no fused multiply-add), so all give bit-identical weights.
#pragma once

#include <cstdint>

#include "kernels/isa.hpp"

namespace syslm::kernels {

// torch.optim.AdamW's single-tensor step for one tensor of n elements:
//   w *= decay; m += (g - m) * (1 - b1); v = v * b2 + g * g * (1 - b2);
//   w += -step_size * (m / (sqrt(v) / bc2_sqrt + eps))
struct AdamWStep {
    float decay;  // 1 - lr * weight_decay
    float b1, b2, eps;
    float step_size;  // lr / (1 - b1^t)
    float bc2_sqrt;   // sqrt(1 - b2^t)
    float grad_scale; // the gradient is g * grad_scale (gradient clipping, fused); no default:
                      // a plain aggregate, as the ISA files must not emit inline constructors
};

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);
void adamw_update_scalar(float* w, const float* g, float* m, float* v, int64_t n,
                         const AdamWStep& s);  // the reference (and the variants' tails)
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s,
                  Isa isa);

namespace x86 {
using AdamWFn = void (*)(float*, const float*, float*, float*, int64_t, const AdamWStep&);
AdamWFn adamw_avx2();    // optimizer_update_avx2.cpp
AdamWFn adamw_avx512();  // optimizer_update_avx512.cpp
}  // namespace x86

}  // namespace syslm::kernels
