// The paged KV cache of the serving engine: pools of fixed-size pages (page_size positions of K
// and V for a set of layers), reference-counted, handed out and taken back in O(1). A sequence
// owns a BlockTable (its page ids in position order, one run per page group); tables fork by
// sharing pages, and a shared last page is copied before a sequence writes into it
// (copy-on-write). Full pages can be published under the hash of the whole token prefix they end
// (chained page by page), so a later sequence with the same prefix reuses them instead of
// recomputing; released published pages stay cached (least recently used first out) until the
// pool needs them.
//
// Page groups: a model whose layers all read every position has one group. Sliding-window
// layers read only the last w positions, so their pages work as a ring (drop_before gives back
// those before the window). When a model mixes them with global layers (Gemma 2 and 3), the
// windowed layers' K/V live in a second group with its own, smaller pool: the global group holds
// every position of the global layers (and every layer's conv rows), the ring group a window of
// the others. When every layer is windowed the one group is the ring.
//
// Page states, per group: free (on the free stack), referenced (count > 0), or cached (count 0,
// published, in the LRU list). Every page is in exactly one state.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "infer/prefix_tiers.hpp"
#include "model/kv_cache.hpp"

namespace syslm::infer {

using PageId = int32_t;

// One group's pages of a sequence: pages[i] holds positions [i * page_size, (i + 1) * page_size).
// Pages given back (drop_before: positions no layer of the group reads again): entries
// [kept, kept + dropped) are -1; the `kept` leading ones hold the global tokens.
struct PageRun {
    std::vector<PageId> pages;
    size_t kept = 0;
    size_t dropped = 0;
};

struct BlockTable {
    static constexpr int kMaxGroups = 2;
    std::array<PageRun, kMaxGroups> runs;  // one per page group (KvPages::groups())
    int64_t length = 0;  // positions reserved (and written, once the step has run)
    const std::vector<PageId>& pages(int group = 0) const {
        return runs[static_cast<size_t>(group)].pages;
    }
};

struct KvPagesConfig {
    int n_layer = 0;
    int64_t kv_dim = 0;
    int page_size = 16;
    int n_pages = 0;       // pages of group 0 (the only one, or the global layers')
    model::KvTypes types;  // of the K and V rows (and the conv rows: types.conv())
    // Conv hybrids: each position also keeps a row of conv_dim elements per layer (its
    // attention-norm output, read by the next positions' convolution); 0: none. In group 0.
    int64_t conv_dim = 0;
    // The sliding-window layers (one flag per layer; empty: none). Their pages are a ring: every
    // layer windowed makes group 0 the ring; some makes them group 1, of ring_pages pages.
    std::vector<bool> ring_layers;
    int ring_pages = 0;
    int window = 0;      // the ring layers' window (positions): what a prefix match must hold
    int keep_pages = 0;  // leading pages a ring keeps for good (the global tokens')
    // Where evicted prefix pages go (RAM, then disk) and come back from on a match; off when
    // neither tier has room.
    PrefixTiersConfig tiers;
    bool prefix_cache = true;  // false: match_prefix finds nothing and publish keeps nothing

    int groups() const;
    bool ring_group(int g) const;  // group g's pages are a ring
    int group_of(int il) const;
    int group_layers(int g) const;
    int group_pages(int g) const { return g == 0 ? n_pages : ring_pages; }
    size_t page_bytes(int g = 0) const;
    size_t bytes() const;  // every group's pages
};

// How match_prefix found the pages it was asked for (full pages before the last token).
struct PrefixLookups {
    int64_t pages = 0;                    // asked for
    int64_t pool = 0, ram = 0, disk = 0;  // found in the pool, or brought back from a tier
};

class KvPages {
public:
    explicit KvPages(const KvPagesConfig& cfg);
    // The pool size that fits `bytes` of K/V memory (one group).
    static int pages_for_bytes(const KvPagesConfig& cfg, size_t bytes);

    const KvPagesConfig& config() const { return cfg_; }
    int groups() const { return static_cast<int>(groups_.size()); }
    // Counts summed over the groups, or of one group.
    int free_pages(int g = -1) const;
    int cached_pages(int g = -1) const;
    int total_pages(int g = -1) const;
    int used_pages(int g = -1) const { return total_pages(g) - free_pages(g) - cached_pages(g); }
    int64_t used_bytes() const;  // of the pages sequences hold
    int ref_count(PageId p, int g = 0) const { return group(g).pages[static_cast<size_t>(p)].refs; }

    // Grows `t` by n positions: new pages as needed in every group, and a copy of a run's last
    // page first if that page is shared. All or nothing: false (t unchanged) when some group,
    // after evicting every cached page, has too few.
    bool append(BlockTable& t, int64_t n);
    bool can_append(const BlockTable& t, int64_t n) const;  // whether append would succeed
    // A new table sharing every page of `t`.
    BlockTable fork(const BlockTable& t);
    // Gives the table's pages back (published ones stay cached); t becomes empty.
    void release(BlockTable& t);
    // Gives back the ring's pages that end at or before position `pos` (never the last page): a
    // window-w layer needs only positions from n - w + 1 on to compute position n. A forked or
    // published page stays with its other holders (published ones cached for prefix matches).
    // The first keep_pages pages stay; the held positions are those pages and one contiguous
    // run from the last dropped page on. No-op without a ring.
    void drop_before(BlockTable& t, int64_t pos);
    // Positions the table holds in pages, summed over the groups.
    int64_t held(const BlockTable& t) const;

    // Writes position pos's key and value rows (kv_dim floats each) of layer il, converted to
    // the pool's types (model::store_kv_row, as KVCache's). The page must be the table's own (not
    // shared).
    void store(const BlockTable& t, int il, int64_t pos, const float* k, const float* v);
    // Rows of layer il in page p of the layer's group: page_size rows of kv_dim elements.
    const void* k(PageId p, int il) const;
    const void* v(PageId p, int il) const;
    // The pages of layer il in table t (its group's run).
    const std::vector<PageId>& pages_of(const BlockTable& t, int il) const {
        return t.pages(layer_group_[static_cast<size_t>(il)]);
    }
    // A conv hybrid's kept row of layer il at position pos of table t (conv_dim elements of
    // types.conv()), and its write (the page must be the table's own).
    const void* conv_row(const BlockTable& t, int il, int64_t pos) const;
    void store_conv(const BlockTable& t, int il, int64_t pos, const float* a);

    // Prefix sharing. match_prefix fills an empty table with the cached full pages that hold
    // exactly the first tokens of `tokens` (always leaving at least one token to compute, so
    // the caller gets logits), and returns the positions covered. A ring needs only the pages
    // of the window before the match point (and its kept ones); the others are entered as
    // dropped. publish registers the table's full pages (those it still holds), whose K/V are
    // those of `tokens` (all written), for later matches. `window` is the sequence's own
    // attention window (0: the model's), `variant` anything else its K/V depend on (a top-p MoE
    // model's p): pages match only within one window and variant.
    int64_t match_prefix(BlockTable& t, std::span<const int32_t> tokens, int window = 0,
                         uint32_t variant = 0);
    void publish(const BlockTable& t, std::span<const int32_t> tokens, int window = 0,
                 uint32_t variant = 0);

    const PrefixLookups& prefix_lookups() const { return lookups_; }
    // The tiers' contents and traffic (zero without tiers).
    PrefixTierStats tier_stats() const { return tiers_ ? tiers_->stats() : PrefixTierStats{}; }

    // Checks that every page is in exactly one state and the counts are consistent with the
    // given live tables (tests); throws Error naming the first violation.
    void check_invariants(std::span<const BlockTable* const> live) const;

private:
    struct Page {
        int32_t refs = 0;
        bool published = false;
        uint64_t key = 0;                 // chained hash of the prefix this page ends
        std::vector<int32_t> tokens;      // its page_size tokens (published pages)
        std::list<PageId>::iterator lru;  // valid while cached
    };
    struct Group {
        bool ring = false;
        int n_layer = 0;
        size_t k_layer_bytes = 0, v_layer_bytes = 0, page_bytes = 0;  // a layer's rows of a page
        std::vector<uint8_t> data;
        std::vector<Page> pages;
        std::vector<PageId> free;
        std::list<PageId> lru;  // cached pages, least recently used first
        std::unordered_map<uint64_t, PageId> index;
        uint8_t* base(PageId p) { return data.data() + static_cast<size_t>(p) * page_bytes; }
        const uint8_t* base(PageId p) const {
            return data.data() + static_cast<size_t>(p) * page_bytes;
        }
    };

    Group& group(int g) { return groups_[static_cast<size_t>(g)]; }
    const Group& group(int g) const { return groups_[static_cast<size_t>(g)]; }
    size_t layer_offset(int il, bool value) const;  // of layer il's K (or V) rows in its page
    std::pair<PageId, size_t> conv_at(const BlockTable& t, int il, int64_t pos) const;
    // A free page, else the LRU cached one (handed to the tiers, if any); -1 when none.
    PageId take_page(Group& g);
    // Places the first m matched pages (keys[i] of page_tokens(i)) in t: retains those in the
    // pool, then brings the tiers' ones back in order. Returns m, or where a tier's page could not
    // come back (no page to put it in, or its file failed its check), leaving t empty then.
    size_t place_match(BlockTable& t, size_t m, std::span<const uint64_t> keys,
                       std::span<const int32_t> tokens, int window);
    bool in_tiers(int g, uint64_t key, std::span<const int32_t> tokens) const {
        return tiers_ && tiers_->find(g, key, tokens) != PrefixTiers::Where::None;
    }
    static void retain(Group& g, PageId p);
    static void drop(Group& g, PageId p);
    static void unpublish(Group& g, PageId p);
    PageId find(const Group& g, uint64_t key, std::span<const int32_t> tokens) const;
    uint64_t chain(uint64_t parent_key, std::span<const int32_t> tokens) const;
    // The held pages a ring needs to compute from position pos on: [0, kept) and [first, ..).
    size_t ring_first(int64_t pos, int window) const;
    void check_run(const BlockTable& t, int g, std::vector<int32_t>& refs) const;

    KvPagesConfig cfg_;
    size_t k_row_, v_row_, conv_row_;  // bytes of one position's key, value and conv rows
    std::vector<Group> groups_;
    std::vector<int> layer_group_, layer_slot_;  // each layer's group and index in it
    std::unique_ptr<PrefixTiers> tiers_;         // null: evicted pages are lost
    PrefixLookups lookups_;
};

}  // namespace syslm::infer
