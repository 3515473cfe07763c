// AdamW (optimizer_update_body.hpp) on V256. See kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/vec_avx2.hpp"

#include "kernels/cpu/optimizer_update_body.hpp"

namespace syslm::kernels::x86 {

AdamWFn adamw_avx2() {
    return adamw_v<V256>;
}

}  // namespace syslm::kernels::x86
