// The attention kernels (attention_table.hpp) on V256. Compiled with the avx2 flags; see
// kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/vec_avx2.hpp"

#include "kernels/cpu/attention_table.hpp"

namespace syslm::kernels::x86 {

AttentionKernels attention_kernels_avx2() {
    return attention_table<V256>(Isa::Avx2);
}

}  // namespace syslm::kernels::x86
