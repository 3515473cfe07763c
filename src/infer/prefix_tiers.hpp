// Where the KV pool's prefix pages go when it evicts them, so that a prefix cache outlives the
// pool's memory: a RAM tier (an LRU of pages bounded in bytes), then a disk folder (one file per
// page, bounded in bytes, written atomically, checked on read). A page is its group, its chain
// key (KvPages: the prefix it ends, the window and the variant), its tokens and its bytes: a
// page brought back is the same bytes as the one evicted, so a hit is exact by construction.
//
// The disk tier lives in a folder of its own under the given directory, made when the tiers are
// and removed with them: the pages are this process's (their bytes depend on the model and the
// cache types), never read by another. Folders of processes that died first are removed when
// the next tiers are made there.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace syslm::infer {

struct PrefixTiersConfig {
    size_t ram_bytes = 0;  // 0: no RAM tier
    std::string disk_dir;  // empty: no disk tier
    size_t disk_bytes = 0;
    bool enabled() const { return ram_bytes > 0 || (!disk_dir.empty() && disk_bytes > 0); }
};

struct PrefixTierStats {
    int64_t ram_pages = 0, disk_pages = 0;
    size_t ram_bytes = 0, disk_bytes = 0;
    int64_t stored = 0;     // pages the pool handed over
    int64_t spilled = 0;    // pages the RAM tier moved to disk
    int64_t discarded = 0;  // pages that fit no tier any more (the oldest first)
    int64_t bad_files = 0;  // disk pages that failed their check on read (deleted, a miss)
};

class PrefixTiers {
public:
    // groups: the pool's page groups, each with its pages' byte size.
    PrefixTiers(const PrefixTiersConfig& cfg, std::vector<size_t> page_bytes);
    ~PrefixTiers();
    PrefixTiers(const PrefixTiers&) = delete;
    PrefixTiers& operator=(const PrefixTiers&) = delete;

    // Keeps a page the pool of group g evicts (page_bytes(g) bytes); replaces an older copy.
    void put(int g, uint64_t key, std::span<const int32_t> tokens, const uint8_t* bytes);
    enum class Where { None, Ram, Disk };
    // Which tier holds the page of this key and these tokens.
    Where find(int g, uint64_t key, std::span<const int32_t> tokens) const;
    // Moves the page's bytes into dst and forgets it there; false when absent, or when its disk
    // file fails its check (deleted, and counted in bad_files).
    bool take(int g, uint64_t key, std::span<const int32_t> tokens, uint8_t* dst);
    PrefixTierStats stats() const;
    const std::string& disk_folder() const { return folder_; }

private:
    struct Entry {
        int g;
        uint64_t key;
        std::vector<int32_t> tokens;
        std::vector<uint8_t> bytes;  // RAM tier only
    };
    using Lru = std::list<Entry>;  // least recently stored first
    struct Tier {
        Lru lru;
        std::vector<std::unordered_map<uint64_t, Lru::iterator>> index;  // per group
        size_t bytes = 0;
    };
    void forget(Tier& t, Lru::iterator it, bool disk);
    void spill(Entry&& e);  // to disk, or discarded
    std::string path_of(int g, uint64_t key) const;
    const Entry* lookup(const Tier& t, int g, uint64_t key, std::span<const int32_t> tokens) const;

    PrefixTiersConfig cfg_;
    std::vector<size_t> page_bytes_;
    std::string folder_;  // the disk tier's own folder (empty: none)
    Tier ram_, disk_;
    PrefixTierStats counts_;
};

}  // namespace syslm::infer
