// The element-wise kernels (elementwise_body.hpp) on V512. Compiled with the avx512 flags; see
// kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/vec_avx512.hpp"

#include "kernels/cpu/elementwise_body.hpp"

namespace syslm::kernels::x86 {

ElementwiseKernels elementwise_kernels_avx512() {
    return elementwise_table<V512>(Isa::Avx512);
}

}  // namespace syslm::kernels::x86
