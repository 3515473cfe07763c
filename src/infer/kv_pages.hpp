// The paged KV cache of the serving engine: one pool of fixed-size pages (page_size positions of
// K and V for every layer), reference-counted, handed out and taken back in O(1). A sequence owns
// a BlockTable (its page ids in position order); tables fork by sharing pages, and a shared last
// page is copied before a sequence writes into it (copy-on-write). Full pages can be published
// under the hash of the whole token prefix they end (chained page by page), so a later sequence
// with the same prefix reuses them instead of recomputing; released published pages stay cached
// (least recently used first out) until the pool needs them.
//
// Page states: free (on the free stack), referenced (count > 0), or cached (count 0, published,
// in the LRU list). Every page is in exactly one state.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.hpp"

namespace syslm::infer {

using PageId = int32_t;

struct BlockTable {
    std::vector<PageId> pages;  // pages[i] holds positions [i * page_size, (i + 1) * page_size)
    int64_t length = 0;         // positions reserved (and written, once the step has run)
    // Pages given back (drop_before: positions no layer of a sliding-window model reads again):
    // entries [kept, kept + dropped) are -1; the `kept` leading ones hold the global tokens.
    size_t kept = 0;
    size_t dropped = 0;
};

struct KvPagesConfig {
    int n_layer = 0;
    int64_t kv_dim = 0;
    int page_size = 16;
    int n_pages = 0;
    DType type = DType::F16;  // F16 or F32
    // Conv hybrids: each position also keeps a row of conv_dim elements per layer (its
    // attention-norm output, read by the next positions' convolution); 0: none.
    int64_t conv_dim = 0;
    size_t page_bytes() const;
};

class KvPages {
public:
    explicit KvPages(const KvPagesConfig& cfg);
    // The pool size that fits `bytes` of K/V memory.
    static int pages_for_bytes(const KvPagesConfig& cfg, size_t bytes);

    const KvPagesConfig& config() const { return cfg_; }
    size_t page_bytes() const { return page_bytes_; }
    int free_pages() const { return static_cast<int>(free_.size()); }
    int cached_pages() const { return static_cast<int>(lru_.size()); }
    int used_pages() const { return cfg_.n_pages - free_pages() - cached_pages(); }
    int ref_count(PageId p) const { return pages_[static_cast<size_t>(p)].refs; }

    // Grows `t` by n positions: new pages as needed, and a copy of its last page first if that
    // page is shared. All or nothing: false (t unchanged) when the pool, after evicting every
    // cached page, has too few.
    bool append(BlockTable& t, int64_t n);
    // A new table sharing every page of `t`.
    BlockTable fork(const BlockTable& t);
    // Gives the table's pages back (published ones stay cached); t becomes empty.
    void release(BlockTable& t);
    // Gives back the table's pages that end at or before position `pos` (never its last page):
    // a model whose every layer has a window w needs only positions from n - w + 1 on to compute
    // position n, so its pages work as a ring. A forked or published page stays with its other
    // holders. The first `keep` pages stay (global tokens every layer still reads); the held
    // positions are those pages and one contiguous run from the last dropped page on.
    void drop_before(BlockTable& t, int64_t pos, size_t keep = 0);
    // Positions of the table in pages it still holds.
    int64_t held(const BlockTable& t) const {
        return t.length - static_cast<int64_t>(t.dropped) * cfg_.page_size;
    }

    // Writes position pos's key and value rows (kv_dim floats each) of layer il, converted to
    // the pool's type. The page must be the table's own (not shared).
    void store(const BlockTable& t, int il, int64_t pos, const float* k, const float* v);
    // Rows of layer il in page p: page_size x kv_dim elements of the pool's type.
    const void* k(PageId p, int il) const { return base(p) + il * layer_bytes_; }
    const void* v(PageId p, int il) const {
        return base(p) + (static_cast<size_t>(cfg_.n_layer) + il) * layer_bytes_;
    }
    // A conv hybrid's kept row of layer il at position pos of table t (conv_dim elements of the
    // pool's type), and its write (the page must be the table's own).
    const void* conv_row(const BlockTable& t, int il, int64_t pos) const;
    void store_conv(const BlockTable& t, int il, int64_t pos, const float* a);

    // Prefix sharing. match_prefix fills an empty table with the cached full pages that hold
    // exactly the first tokens of `tokens` (always leaving at least one token to compute, so
    // the caller gets logits), and returns the positions covered. publish registers the table's
    // full pages, whose K/V are those of `tokens` (all written), for later matches. `variant`
    // tells K/V computed differently from the same tokens apart (a sequence's own attention
    // window): pages match only within one variant.
    int64_t match_prefix(BlockTable& t, std::span<const int32_t> tokens, uint64_t variant = 0);
    void publish(const BlockTable& t, std::span<const int32_t> tokens, uint64_t variant = 0);

    // Checks that every page is in exactly one state and the counts are consistent with the
    // given live tables (tests); throws Error naming the first violation.
    void check_invariants(std::span<const BlockTable* const> live) const;

private:
    struct Page {
        int32_t refs = 0;
        bool published = false;
        uint64_t key = 0;                 // chained hash of the prefix this page ends
        PageId parent = -1;               // the page before it in that prefix (-1: first)
        std::vector<int32_t> tokens;      // its page_size tokens (published pages)
        std::list<PageId>::iterator lru;  // valid while cached
    };

    std::pair<PageId, size_t> conv_at(const BlockTable& t, int il, int64_t pos) const;
    uint8_t* base(PageId p) { return data_.data() + static_cast<size_t>(p) * page_bytes_; }
    const uint8_t* base(PageId p) const {
        return data_.data() + static_cast<size_t>(p) * page_bytes_;
    }
    PageId take_page();  // a free page, else the LRU cached one (unpublished); -1 when none
    void retain(PageId p);
    void drop(PageId p);
    void unpublish(PageId p);
    uint64_t chain(uint64_t parent_key, std::span<const int32_t> tokens) const;

    KvPagesConfig cfg_;
    size_t elem_, row_bytes_, layer_bytes_, page_bytes_;
    std::vector<uint8_t> data_;
    std::vector<Page> pages_;
    std::vector<PageId> free_;
    std::list<PageId> lru_;  // cached pages, least recently used first
    std::unordered_map<uint64_t, PageId> index_;
};

}  // namespace syslm::infer
