// AdamW (optimizer_update_body.hpp) on V512. See kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/vec_avx512.hpp"

#include "kernels/cpu/optimizer_update_body.hpp"

namespace syslm::kernels::x86 {

AdamWFn adamw_avx512() {
    return adamw_v<V512>;
}

}  // namespace syslm::kernels::x86
