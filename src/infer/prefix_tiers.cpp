#include "infer/prefix_tiers.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/checksum.hpp"
#include "core/error.hpp"

namespace syslm::infer {

namespace {

constexpr char kMagic[8] = {'S', 'Y', 'K', 'V', 'P', 'A', 'G', '1'};

// A page file: magic, group, key, token count, tokens, byte count, bytes, then the WordHash of
// everything before it.
struct FileHeader {
    char magic[8];
    uint32_t group, n_tokens;
    uint64_t key, n_bytes;
};

std::atomic<uint64_t> folders{0};

}  // namespace

PrefixTiers::PrefixTiers(const PrefixTiersConfig& cfg, std::vector<size_t> page_bytes)
    : cfg_(cfg), page_bytes_(std::move(page_bytes)) {
    ram_.index.resize(page_bytes_.size());
    disk_.index.resize(page_bytes_.size());
    if (cfg_.disk_dir.empty() || cfg_.disk_bytes == 0) return;
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(cfg_.disk_dir, ec);
    SYSLM_CHECK(!ec && fs::is_directory(cfg_.disk_dir), "prefix cache: cannot make the folder ",
                cfg_.disk_dir, ": ", ec.message());
    // Folders of processes that died without removing theirs (syslm-kv-<pid>-<n>).
    for (const auto& f : fs::directory_iterator(cfg_.disk_dir, ec)) {
        const std::string name = f.path().filename().string();
        if (!name.starts_with("syslm-kv-")) continue;
        const long pid = std::strtol(name.c_str() + 9, nullptr, 10);
        if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
            fs::remove_all(f.path(), ec);
    }
    folder_ = (fs::path(cfg_.disk_dir) / ("syslm-kv-" + std::to_string(::getpid()) + "-" +
                                          std::to_string(folders.fetch_add(1))))
                  .string();
    fs::remove_all(folder_, ec);  // a folder of an earlier process that had this pid
    fs::create_directory(folder_, ec);
    SYSLM_CHECK(!ec, "prefix cache: cannot make the folder ", folder_, ": ", ec.message());
}

PrefixTiers::~PrefixTiers() {
    if (folder_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(folder_, ec);  // the pages are this process's alone
}

std::string PrefixTiers::path_of(int g, uint64_t key) const {
    char name[48];
    std::snprintf(name, sizeof name, "/%d-%016llx.kv", g, static_cast<unsigned long long>(key));
    return folder_ + name;
}

const PrefixTiers::Entry* PrefixTiers::lookup(const Tier& t, int g, uint64_t key,
                                              std::span<const int32_t> tokens) const {
    const auto& index = t.index[static_cast<size_t>(g)];
    const auto it = index.find(key);
    if (it == index.end()) return nullptr;
    const Entry& e = *it->second;
    return std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end()) ? &e
                                                                                      : nullptr;
}

PrefixTiers::Where PrefixTiers::find(int g, uint64_t key, std::span<const int32_t> tokens) const {
    if (lookup(ram_, g, key, tokens)) return Where::Ram;
    if (lookup(disk_, g, key, tokens)) return Where::Disk;
    return Where::None;
}

void PrefixTiers::forget(Tier& t, Lru::iterator it, bool disk) {
    t.index[static_cast<size_t>(it->g)].erase(it->key);
    t.bytes -= page_bytes_[static_cast<size_t>(it->g)];
    if (disk) {
        std::error_code ec;
        std::filesystem::remove(path_of(it->g, it->key), ec);
    }
    t.lru.erase(it);
}

void PrefixTiers::put(int g, uint64_t key, std::span<const int32_t> tokens, const uint8_t* bytes) {
    const size_t n = page_bytes_[static_cast<size_t>(g)];
    ++counts_.stored;
    // A newer copy replaces any older one, in either tier.
    for (Tier* t : {&ram_, &disk_}) {
        auto& index = t->index[static_cast<size_t>(g)];
        if (const auto it = index.find(key); it != index.end()) forget(*t, it->second, t == &disk_);
    }
    Entry e{g, key, {tokens.begin(), tokens.end()}, {}};
    if (cfg_.ram_bytes < n) {
        e.bytes.assign(bytes, bytes + n);
        spill(std::move(e));
        return;
    }
    while (ram_.bytes + n > cfg_.ram_bytes) {  // the oldest RAM pages go down a tier
        Entry old = std::move(ram_.lru.front());
        ram_.index[static_cast<size_t>(old.g)].erase(old.key);
        ram_.bytes -= page_bytes_[static_cast<size_t>(old.g)];
        ram_.lru.pop_front();
        spill(std::move(old));
    }
    e.bytes.assign(bytes, bytes + n);
    ram_.lru.push_back(std::move(e));
    ram_.index[static_cast<size_t>(g)][key] = std::prev(ram_.lru.end());
    ram_.bytes += n;
}

void PrefixTiers::spill(Entry&& e) {
    const size_t n = page_bytes_[static_cast<size_t>(e.g)];
    if (folder_.empty() || cfg_.disk_bytes < n) {
        ++counts_.discarded;
        return;
    }
    while (disk_.bytes + n > cfg_.disk_bytes) {
        forget(disk_, disk_.lru.begin(), true);
        ++counts_.discarded;
    }
    FileHeader hh{};
    std::memcpy(hh.magic, kMagic, sizeof kMagic);
    hh.group = static_cast<uint32_t>(e.g);
    hh.n_tokens = static_cast<uint32_t>(e.tokens.size());
    hh.key = e.key;
    hh.n_bytes = n;
    WordHash sum;
    sum.update(&hh, sizeof hh);
    sum.update(e.tokens.data(), e.tokens.size() * sizeof(int32_t));
    sum.update(e.bytes.data(), n);
    const uint64_t check = sum.value();
    const std::string path = path_of(e.g, e.key), tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(&hh), sizeof hh);
        out.write(reinterpret_cast<const char*>(e.tokens.data()),
                  static_cast<std::streamsize>(e.tokens.size() * sizeof(int32_t)));
        out.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(n));
        out.write(reinterpret_cast<const char*>(&check), sizeof check);
        if (!out.flush()) {  // a full disk loses the page, not the server
            std::error_code ec;
            std::filesystem::remove(tmp, ec);
            ++counts_.discarded;
            return;
        }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::filesystem::remove(tmp, ec);
        ++counts_.discarded;
        return;
    }
    ++counts_.spilled;
    e.bytes = {};
    disk_.lru.push_back(std::move(e));
    disk_.index[static_cast<size_t>(disk_.lru.back().g)][disk_.lru.back().key] =
        std::prev(disk_.lru.end());
    disk_.bytes += n;
}

bool PrefixTiers::take(int g, uint64_t key, std::span<const int32_t> tokens, uint8_t* dst) {
    const size_t n = page_bytes_[static_cast<size_t>(g)];
    if (lookup(ram_, g, key, tokens)) {
        const auto it = ram_.index[static_cast<size_t>(g)].at(key);
        std::memcpy(dst, it->bytes.data(), n);
        forget(ram_, it, false);
        return true;
    }
    if (!lookup(disk_, g, key, tokens)) return false;
    const auto it = disk_.index[static_cast<size_t>(g)].at(key);
    std::ifstream in(path_of(g, key), std::ios::binary);
    FileHeader h{};
    std::vector<int32_t> got(tokens.size());
    uint64_t check = 0;
    in.read(reinterpret_cast<char*>(&h), sizeof h);
    in.read(reinterpret_cast<char*>(got.data()),
            static_cast<std::streamsize>(got.size() * sizeof(int32_t)));
    bool ok = in && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 &&
              h.group == static_cast<uint32_t>(g) && h.key == key && h.n_tokens == tokens.size() &&
              h.n_bytes == n && std::equal(got.begin(), got.end(), tokens.begin());
    if (ok) {
        in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(n));
        in.read(reinterpret_cast<char*>(&check), sizeof check);
        WordHash sum;
        sum.update(&h, sizeof h);
        sum.update(got.data(), got.size() * sizeof(int32_t));
        sum.update(dst, n);
        ok = in && sum.value() == check;
    }
    forget(disk_, it, true);
    if (!ok) ++counts_.bad_files;
    return ok;
}

PrefixTierStats PrefixTiers::stats() const {
    PrefixTierStats s = counts_;
    s.ram_pages = static_cast<int64_t>(ram_.lru.size());
    s.disk_pages = static_cast<int64_t>(disk_.lru.size());
    s.ram_bytes = ram_.bytes;
    s.disk_bytes = disk_.bytes;
    return s;
}

}  // namespace syslm::infer
