// What the running CPU can do, read with CPUID (and XGETBV: the OS must save the wide registers).
// Kernels choose their variant from this at run time, never from the build machine's flags.
#pragma once

#include <string>

namespace syslm {

struct CpuFeatures {
    bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
    bool avx512vnni = false, avx512bf16 = false, avx_vnni = false;
    std::string vendor, brand;
    std::string summary() const;  // e.g. "AVX2 FMA F16C AVX512F ... AVX512_BF16"
};

const CpuFeatures& cpu_features();

}  // namespace syslm
