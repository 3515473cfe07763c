#include "profile/cpu_caches.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace syslm::profile {
namespace {

std::string read_line(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::string s;
    std::getline(in, s);
    return s;
}

// sysfs writes sizes as "48K", "2048K", "32M".
size_t parse_size(const std::string& s) {
    size_t pos = 0;
    size_t v = 0;
    try {
        v = std::stoull(s, &pos);
    } catch (const std::exception&) {
        return 0;
    }
    if (pos < s.size()) {
        if (s[pos] == 'K')
            v <<= 10;
        else if (s[pos] == 'M')
            v <<= 20;
        else if (s[pos] == 'G')
            v <<= 30;
    }
    return v;
}

std::string human(size_t bytes) {
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
    return std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

std::vector<CacheLevel> cpu_caches() {
    namespace fs = std::filesystem;
    std::vector<CacheLevel> out;
    const fs::path base = "/sys/devices/system/cpu";
    std::error_code ec;
    for (int idx = 0;; ++idx) {
        const fs::path dir = base / "cpu0/cache" / ("index" + std::to_string(idx));
        if (!fs::exists(dir, ec)) break;
        CacheLevel c;
        try {
            c.level = std::stoi(read_line(dir / "level"));
        } catch (const std::exception&) {
            continue;
        }
        c.type = read_line(dir / "type");
        c.bytes = parse_size(read_line(dir / "size"));
        // Instances: distinct shared_cpu_list values of this index over all CPUs.
        std::set<std::string> sharing;
        for (const auto& e : fs::directory_iterator(base, ec)) {
            const std::string name = e.path().filename().string();
            if (name.size() < 4 || name.compare(0, 3, "cpu") != 0 ||
                name.find_first_not_of("0123456789", 3) != std::string::npos)
                continue;
            const fs::path f =
                e.path() / "cache" / ("index" + std::to_string(idx)) / "shared_cpu_list";
            if (fs::exists(f, ec)) sharing.insert(read_line(f));
        }
        c.instances = static_cast<int>(std::max<size_t>(1, sharing.size()));
        out.push_back(c);
    }
    return out;
}

std::string describe(const std::vector<CacheLevel>& caches) {
    std::ostringstream os;
    for (size_t i = 0; i < caches.size(); ++i) {
        const CacheLevel& c = caches[i];
        if (i) os << ", ";
        os << 'L' << c.level;
        if (c.type == "Data")
            os << 'd';
        else if (c.type == "Instruction")
            os << 'i';
        os << ' ' << human(c.bytes) << " x" << c.instances;
    }
    return os.str();
}

}  // namespace syslm::profile
