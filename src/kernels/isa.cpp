#include "kernels/isa.hpp"

#include <cstdlib>
#include <string_view>

#include "core/cpu_features.hpp"
#include "core/error.hpp"

namespace syslm::kernels {

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
    }
    return "?";
}

bool isa_supported(Isa isa) {
    const CpuFeatures& f = cpu_features();
    switch (isa) {
        case Isa::Scalar: return true;
        case Isa::Avx2: return f.avx2 && f.fma && f.f16c;
        case Isa::Avx512:
            return isa_supported(Isa::Avx2) && f.avx512f && f.avx512bw && f.avx512vl &&
                   f.avx512dq && f.avx512vnni;
    }
    return false;
}

Isa active_isa() {
    static const Isa isa = [] {
        Isa best = Isa::Scalar;
        for (Isa i : {Isa::Avx2, Isa::Avx512})
            if (isa_supported(i)) best = i;
        if (const char* env = std::getenv("SYSLM_ISA")) {
            const std::string_view want(env);
            Isa cap = best;
            if (want == "scalar") cap = Isa::Scalar;
            else if (want == "avx2") cap = Isa::Avx2;
            else if (want == "avx512") cap = Isa::Avx512;
            else fail("SYSLM_ISA='", want, "': expected scalar, avx2 or avx512");
            if (static_cast<int>(cap) < static_cast<int>(best)) best = cap;
        }
        return best;
    }();
    return isa;
}

}  // namespace syslm::kernels
