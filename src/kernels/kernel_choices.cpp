#include "kernels/kernel_choices.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/cpu_features.hpp"
#include "core/error.hpp"
#include "kernels/isa.hpp"

namespace syslm::kernels {
namespace fs = std::filesystem;

namespace {

std::string signature_text() {
    const CpuFeatures& f = cpu_features();
    std::string s = f.vendor + " | " + f.brand + " | family " + std::to_string(f.family) +
                    " model " + std::to_string(f.model) + " stepping " +
                    std::to_string(f.stepping) + " | " + f.summary() + " | ISA " +
                    isa_name(active_isa()) + (amx_tiles_permitted() ? " | AMX granted" : "");
    struct stat st {};
    if (::stat("/proc/self/exe", &st) == 0)
        s += " | executable " + std::to_string(st.st_size) + " bytes, modified " +
             std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    return s;
}

uint64_t fnv1a(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

std::string base_dir() {
    const char* env = std::getenv("SYSLM_KERNEL_CACHE");
    if (env && *env) return std::string(env) == "off" ? "" : std::string(env);
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
        return (fs::path(x) / "syslm" / "kernels").string();
    const char* home = std::getenv("HOME");
    return (fs::path(home && *home ? home : "/tmp") / ".cache" / "syslm" / "kernels").string();
}

// Says once per process why choices are not remembered: results may then differ between runs.
void warn_not_remembered(const std::string& what) {
    static std::atomic<bool> warned{false};
    if (warned.exchange(true)) return;
    std::fprintf(stderr,
                 "syslm: kernel choices are timed in this process, not remembered: %s "
                 "(SYSLM_KERNEL_CACHE=DIR names another place)\n",
                 what.c_str());
}

std::optional<KernelChoice> read_choice(const fs::path& file) {
    std::ifstream in(file);
    if (!in) return std::nullopt;
    KernelChoice c;
    if (!std::getline(in, c.value)) return std::nullopt;
    std::getline(in, c.timings);
    c.remembered = true;
    return c;
}

bool valid_key(const std::string& key) {
    if (key.empty() || key[0] == '.') return false;
    for (char ch : key)
        if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
            return false;
    return true;
}

// Writes the choice to a file of its own, then links it in as `file` unless a valid one is there
// already (another process timed first: its choice wins). Returns the choice now stored, or
// nullopt where the store cannot be written.
std::optional<KernelChoice> store_choice(const fs::path& file, const KernelChoice& c,
                                         const std::function<bool(const std::string&)>& valid) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    if (ec) {
        warn_not_remembered(file.parent_path().string() + ": " + ec.message());
        return std::nullopt;
    }
    const fs::path info = file.parent_path() / "cpu.txt";
    if (!fs::exists(info, ec)) std::ofstream(info) << signature_text() << "\n";
    const fs::path tmp = file.string() + ".tmp." + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << c.value << "\n" << c.timings << "\n";
        out.flush();
        if (!out) {
            warn_not_remembered(tmp.string() + ": cannot be written");
            fs::remove(tmp, ec);
            return std::nullopt;
        }
    }
    std::optional<KernelChoice> stored;
    if (::link(tmp.c_str(), file.c_str()) == 0) {
        stored = c;
    } else if (errno == EEXIST) {
        stored = read_choice(file);
        if (!stored || !valid(stored->value))  // damaged: replaced by this one
            stored = ::rename(tmp.c_str(), file.c_str()) == 0 ? std::optional(c) : std::nullopt;
    }
    if (!stored) warn_not_remembered(file.string() + ": " + std::strerror(errno));
    fs::remove(tmp, ec);
    return stored;
}

}  // namespace

std::string kernel_choices_dir() {
    const std::string base = base_dir();
    if (base.empty()) return "";
    char name[17];
    std::snprintf(name, sizeof name, "%016llx",
                  static_cast<unsigned long long>(fnv1a(signature_text())));
    return (fs::path(base) / name).string();
}

std::optional<KernelChoice> stored_kernel_choice(
    const std::string& key, const std::function<bool(const std::string&)>& valid) {
    SYSLM_CHECK(valid_key(key), "kernel choice key '", key, "': letters, digits, - _ . only");
    const std::string dir = kernel_choices_dir();
    if (dir.empty()) return std::nullopt;
    std::optional<KernelChoice> c = read_choice(fs::path(dir) / key);
    if (c && !valid(c->value)) return std::nullopt;
    return c;
}

KernelChoice store_kernel_choice(const std::string& key, const KernelChoice& c,
                                 const std::function<bool(const std::string&)>& valid) {
    SYSLM_CHECK(valid_key(key), "kernel choice key '", key, "': letters, digits, - _ . only");
    SYSLM_CHECK(valid(c.value), "kernel choice ", key, ": timed an invalid value '", c.value, "'");
    const std::string dir = kernel_choices_dir();
    if (dir.empty()) return c;
    const std::optional<KernelChoice> stored = store_choice(fs::path(dir) / key, c, valid);
    if (!stored || stored->value == c.value) return c;  // with this process's timings
    return *stored;
}

KernelChoice remembered_kernel_choice(const std::string& key,
                                      const std::function<KernelChoice()>& measure,
                                      const std::function<bool(const std::string&)>& valid) {
    if (std::optional<KernelChoice> cached = stored_kernel_choice(key, valid)) return *cached;
    return store_kernel_choice(key, measure(), valid);
}

void forget_kernel_choices() {
    const std::string dir = kernel_choices_dir();
    if (dir.empty()) return;
    std::error_code ec;
    fs::remove_all(dir, ec);
    SYSLM_CHECK(!ec, dir, ": cannot remove the stored kernel choices: ", ec.message());
}

}  // namespace syslm::kernels
