#include "kernels/cpu/optimizer_update.hpp"

#include <cmath>

#include "core/error.hpp"

namespace syslm::kernels {

void adamw_update_scalar(float* w, const float* g, float* m, float* v, int64_t n,
                         const AdamWStep& s) {
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] * s.grad_scale;
        w[i] *= s.decay;
        m[i] += (gi - m[i]) * (1.0f - s.b1);
        v[i] = v[i] * s.b2 + gi * gi * (1.0f - s.b2);
        const float denom = std::sqrt(v[i]) / s.bc2_sqrt + s.eps;
        w[i] += -s.step_size * (m[i] / denom);
    }
}

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s) {
    adamw_update(w, g, m, v, n, s, active_isa());
}

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s,
                  Isa isa) {
    static const x86::AdamWFn fns[3] = {
        adamw_update_scalar,
        isa_supported(Isa::Avx2) ? x86::adamw_avx2() : nullptr,
        isa_supported(Isa::Avx512) ? x86::adamw_avx512() : nullptr,
    };
    SYSLM_CHECK(isa_supported(isa), "AdamW: this CPU does not support ", isa_name(isa));
    fns[static_cast<int>(isa)](w, g, m, v, n, s);
}

}  // namespace syslm::kernels
