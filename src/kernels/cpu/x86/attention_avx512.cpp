// The attention kernels (attention_table.hpp) on V512. Compiled with the avx512 flags; see
// kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/vec_avx512.hpp"

#include "kernels/cpu/attention_table.hpp"

namespace syslm::kernels::x86 {

AttentionKernels attention_kernels_avx512() {
    return attention_table<V512>(Isa::Avx512);
}

}  // namespace syslm::kernels::x86
