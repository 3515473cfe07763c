#include "core/host_memory.hpp"

#include <fstream>
#include <string>

namespace syslm {

size_t meminfo_bytes(const char* field) {
    std::ifstream in("/proc/meminfo");
    const std::string want = std::string(field) + ":";
    std::string key;
    double kib = 0;
    while (in >> key >> kib) {
        if (key == want) return static_cast<size_t>(kib * 1024);
        in.ignore(1 << 10, '\n');
    }
    return 0;
}

bool huge_pages_available() {
    // The mode in brackets is the one in force: "[always] madvise never".
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    if (!std::getline(in, line)) return false;
    return line.find("[always]") != std::string::npos ||
           line.find("[madvise]") != std::string::npos;
}

}  // namespace syslm
