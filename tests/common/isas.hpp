// The instruction sets this CPU runs, for kernel tests that check every variant of a kernel.
#pragma once

#include <vector>

#include "kernels/isa.hpp"

namespace syslm::testing {

inline std::vector<kernels::Isa> supported_isas() {
    std::vector<kernels::Isa> v;
    for (kernels::Isa i : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512})
        if (kernels::isa_supported(i)) v.push_back(i);
    return v;
}

}  // namespace syslm::testing
