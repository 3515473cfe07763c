// What the running CPU can do, read with CPUID (and XGETBV: the OS must save the wide registers).
// Kernels choose their variant from this at run time, never from the build machine's flags.
#pragma once

#include <string>

namespace syslm {

struct CpuFeatures {
    bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
    bool avx512vnni = false, avx512bf16 = false, avx_vnni = false;
    // AMX: the CPU has the tile unit and the OS manages its state (XCR0 bits 17-18); a process
    // must still ask for it (amx_tiles_permitted).
    bool amx_tile = false, amx_bf16 = false, amx_int8 = false, amx_fp16 = false;
    std::string vendor, brand;
    int family = 0, model = 0, stepping = 0;  // CPUID leaf 1, as /proc/cpuinfo shows them
    std::string summary() const;  // e.g. "AVX2 FMA F16C AVX512F ... AVX512_BF16"
};

const CpuFeatures& cpu_features();

// Asks Linux once for this process's AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM); true when
// the CPU has AMX-TILE and the request was granted. Every thread may then use the tiles.
bool amx_tiles_permitted();

}  // namespace syslm
