#include "core/cpu_features.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace syslm {
namespace {

bool bit(uint32_t reg, int b) { return (reg >> b) & 1u; }

uint64_t xgetbv0() {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
    CpuFeatures f;
    uint32_t a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
    const uint32_t max_leaf = a;
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    f.vendor = vendor;

    __get_cpuid(1, &a, &b, &c, &d);
    // Display family and model, as /proc/cpuinfo prints them (SDM Vol. 2A, CPUID leaf 1).
    const uint32_t base_family = (a >> 8) & 0xF, base_model = (a >> 4) & 0xF;
    f.family = static_cast<int>(base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family);
    f.model = static_cast<int>(base_family == 0x6 || base_family == 0xF
                                   ? base_model + (((a >> 16) & 0xF) << 4)
                                   : base_model);
    f.stepping = static_cast<int>(a & 0xF);
    f.sse42 = bit(c, 20);
    const bool osxsave = bit(c, 27);
    const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    const bool os_avx = (xcr0 & 0x6) == 0x6;            // XMM and YMM state
    const bool os_avx512 = (xcr0 & 0xE6) == 0xE6;       // + opmask and ZMM state
    f.avx = bit(c, 28) && os_avx;
    f.fma = bit(c, 12) && os_avx;
    f.f16c = bit(c, 29) && os_avx;
    if (max_leaf >= 7) {
        __get_cpuid_count(7, 0, &a, &b, &c, &d);
        f.avx2 = bit(b, 5) && os_avx;
        f.avx512f = bit(b, 16) && os_avx512;
        f.avx512dq = bit(b, 17) && os_avx512;
        f.avx512bw = bit(b, 30) && os_avx512;
        f.avx512vl = bit(b, 31) && os_avx512;
        f.avx512vnni = bit(c, 11) && os_avx512;
        const bool os_amx = (xcr0 & 0x60000) == 0x60000;  // XTILECFG and XTILEDATA
        f.amx_bf16 = bit(d, 22) && os_amx;
        f.amx_tile = bit(d, 24) && os_amx;
        f.amx_int8 = bit(d, 25) && os_amx;
        __get_cpuid_count(7, 1, &a, &b, &c, &d);
        f.avx512bf16 = bit(a, 5) && os_avx512;
        f.amx_fp16 = bit(a, 21) && f.amx_tile;
        f.avx_vnni = bit(a, 4) && os_avx;
    }
    uint32_t regs[12];
    if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
        for (uint32_t i = 0; i < 3; ++i)
            __get_cpuid(0x80000002 + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2],
                        &regs[4 * i + 3]);
        char brand[49] = {};
        std::memcpy(brand, regs, 48);
        f.brand = brand;
        while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
    }
    return f;
}

}  // namespace

std::string CpuFeatures::summary() const {
    std::string s;
    auto add = [&](bool on, const char* name) {
        if (!on) return;
        if (!s.empty()) s += ' ';
        s += name;
    };
    add(sse42, "SSE4.2");
    add(avx, "AVX");
    add(avx2, "AVX2");
    add(fma, "FMA");
    add(f16c, "F16C");
    add(avx_vnni, "AVX_VNNI");
    add(avx512f, "AVX512F");
    add(avx512dq, "AVX512DQ");
    add(avx512bw, "AVX512BW");
    add(avx512vl, "AVX512VL");
    add(avx512vnni, "AVX512_VNNI");
    add(avx512bf16, "AVX512_BF16");
    add(amx_tile, "AMX_TILE");
    add(amx_bf16, "AMX_BF16");
    add(amx_int8, "AMX_INT8");
    add(amx_fp16, "AMX_FP16");
    return s;
}

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = detect();
    return f;
}

}  // namespace syslm

namespace syslm {

bool amx_tiles_permitted() {
    static const bool ok = [] {
        if (!cpu_features().amx_tile) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
        constexpr int kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
        return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
        return false;
#endif
    }();
    return ok;
}

}  // namespace syslm
