// The element-wise kernels (elementwise_body.hpp) on V256. Compiled with the avx2 flags; see
// kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/vec_avx2.hpp"

#include "kernels/cpu/elementwise_body.hpp"

namespace syslm::kernels::x86 {

ElementwiseKernels elementwise_kernels_avx2() {
    return elementwise_table<V256>(Isa::Avx2);
}

}  // namespace syslm::kernels::x86
