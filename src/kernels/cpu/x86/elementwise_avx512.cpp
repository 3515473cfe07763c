// The element-wise kernels (elementwise_body.hpp) on V512. Compiled with the avx512 flags; see
// kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/vec_avx512.hpp"

#include "kernels/cpu/elementwise_body.hpp"
#include "kernels/cpu/elementwise_kernels.hpp"

namespace syslm::kernels::x86 {

ElementwiseKernels elementwise_kernels_avx512() {
    ElementwiseKernels k{};
    k.isa = Isa::Avx512;
    k.swiglu = swiglu_v<V512>;
    k.gelu_tanh = gelu_tanh_v<V512>;
    k.rms_norm = rms_norm_v<V512>;
    k.layer_norm = layer_norm_v<V512>;
    k.xent_row = xent_row_v<V512>;
    k.swiglu_backward = swiglu_backward_v<V512>;
    k.gelu_tanh_backward = gelu_tanh_backward_v<V512>;
    return k;
}

}  // namespace syslm::kernels::x86
