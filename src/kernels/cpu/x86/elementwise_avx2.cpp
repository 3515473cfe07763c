// The element-wise kernels (elementwise_body.hpp) on V256. Compiled with the avx2 flags; see
// kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/vec_avx2.hpp"

#include "kernels/cpu/elementwise_body.hpp"
#include "kernels/cpu/elementwise_kernels.hpp"

namespace syslm::kernels::x86 {

ElementwiseKernels elementwise_kernels_avx2() {
    ElementwiseKernels k{};
    k.isa = Isa::Avx2;
    k.swiglu = swiglu_v<V256>;
    k.gelu_tanh = gelu_tanh_v<V256>;
    k.rms_norm = rms_norm_v<V256>;
    k.layer_norm = layer_norm_v<V256>;
    k.xent_row = xent_row_v<V256>;
    k.swiglu_backward = swiglu_backward_v<V256>;
    k.gelu_tanh_backward = gelu_tanh_backward_v<V256>;
    return k;
}

}  // namespace syslm::kernels::x86
