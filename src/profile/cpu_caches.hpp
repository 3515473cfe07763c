// The CPU's caches as Linux describes them in sysfs (/sys/devices/system/cpu/cpu0/cache).
#pragma once

#include <string>
#include <vector>

namespace syslm::profile {

struct CacheLevel {
    int level = 0;
    std::string type;   // "Data", "Instruction" or "Unified"
    size_t bytes = 0;   // per instance
    int instances = 0;  // distinct caches of this level and type on the machine
};

// Caches seen from cpu0, L1 first; empty when sysfs does not describe them (e.g. some VMs).
std::vector<CacheLevel> cpu_caches();
// "L1d 32 KiB x2, L1i 32 KiB x2, L2 1 MiB x2, L3 32 MiB x1".
std::string describe(const std::vector<CacheLevel>& caches);

}  // namespace syslm::profile
