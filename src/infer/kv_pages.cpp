#include "infer/kv_pages.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::infer {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace

KvPages::KvPages(const KvPagesConfig& cfg) : cfg_(cfg) {
    SYSLM_CHECK(cfg.n_layer > 0 && cfg.kv_dim > 0 && cfg.page_size > 0 && cfg.n_pages > 0,
                "KV pages: ", cfg.n_pages, " pages of ", cfg.page_size, " positions x ",
                cfg.n_layer, " layers x ", cfg.kv_dim, " is empty");
    SYSLM_CHECK(cfg.type == DType::F16 || cfg.type == DType::F32,
                "KV pages: element type must be f16 or f32");
    elem_ = cfg.type == DType::F16 ? 2 : 4;
    row_bytes_ = static_cast<size_t>(cfg.kv_dim) * elem_;
    layer_bytes_ = row_bytes_ * static_cast<size_t>(cfg.page_size);
    page_bytes_ = cfg.page_bytes();
    try {
        data_.resize(page_bytes_ * static_cast<size_t>(cfg.n_pages));
    } catch (const std::bad_alloc&) {
        fail("KV pages: cannot allocate ", (page_bytes_ * cfg.n_pages) >> 20, " MiB for ",
             cfg.n_pages, " pages");
    }
    pages_.resize(static_cast<size_t>(cfg.n_pages));
    free_.reserve(static_cast<size_t>(cfg.n_pages));
    for (PageId p = cfg.n_pages - 1; p >= 0; --p) free_.push_back(p);  // page 0 first out
}

size_t KvPagesConfig::page_bytes() const {
    const size_t elem = type == DType::F16 ? 2 : 4;
    return elem * static_cast<size_t>(2 * kv_dim + conv_dim) * page_size * n_layer;
}

int KvPages::pages_for_bytes(const KvPagesConfig& cfg, size_t bytes) {
    const size_t page = cfg.page_bytes();
    SYSLM_CHECK(page > 0 && bytes >= page, "KV pages: ", bytes, " bytes hold no page of ", page);
    return static_cast<int>(std::min<size_t>(bytes / page, 1u << 30));
}

uint64_t KvPages::chain(uint64_t parent_key, std::span<const int32_t> tokens) const {
    uint64_t h = mix(parent_key ^ 0x5A17A5u);
    for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
    return h;
}

PageId KvPages::take_page() {
    if (!free_.empty()) {
        const PageId p = free_.back();
        free_.pop_back();
        return p;
    }
    if (lru_.empty()) return -1;
    const PageId p = lru_.front();  // evict the least recently used cached prefix page
    lru_.pop_front();
    unpublish(p);
    return p;
}

void KvPages::retain(PageId p) {
    Page& pg = pages_[static_cast<size_t>(p)];
    if (pg.refs == 0 && pg.published) lru_.erase(pg.lru);  // cached -> referenced
    ++pg.refs;
}

void KvPages::drop(PageId p) {
    Page& pg = pages_[static_cast<size_t>(p)];
    SYSLM_CHECK(pg.refs > 0, "KV pages: page ", p, " released more often than taken");
    if (--pg.refs > 0) return;
    if (pg.published)
        pg.lru = lru_.insert(lru_.end(), p);  // most recently used last
    else
        free_.push_back(p);
}

void KvPages::unpublish(PageId p) {
    Page& pg = pages_[static_cast<size_t>(p)];
    const auto it = index_.find(pg.key);
    if (it != index_.end() && it->second == p) index_.erase(it);
    pg.published = false;
    pg.tokens.clear();
}

bool KvPages::append(BlockTable& t, int64_t n) {
    SYSLM_CHECK(n >= 0, "KV pages: cannot append ", n, " positions");
    if (n == 0) return true;
    const int64_t ps = cfg_.page_size, len = t.length + n;
    const size_t new_pages = static_cast<size_t>((len + ps - 1) / ps) - t.pages.size();
    const bool cow = t.length % ps != 0 && pages_[static_cast<size_t>(t.pages.back())].refs > 1;
    if (new_pages + (cow ? 1 : 0) > free_.size() + lru_.size()) return false;
    if (cow) {  // the partly filled last page is shared: write into a copy of it
        const PageId old = t.pages.back(), copy = take_page();
        std::memcpy(base(copy), base(old), page_bytes_);
        retain(copy);
        drop(old);
        t.pages.back() = copy;
    }
    for (size_t i = 0; i < new_pages; ++i) {
        const PageId p = take_page();
        retain(p);
        t.pages.push_back(p);
    }
    t.length = len;
    return true;
}

BlockTable KvPages::fork(const BlockTable& t) {
    for (PageId p : t.pages)
        if (p >= 0) retain(p);
    return t;
}

void KvPages::release(BlockTable& t) {
    for (PageId p : t.pages)
        if (p >= 0) drop(p);
    t.pages.clear();
    t.length = 0;
    t.kept = 0;
    t.dropped = 0;
}

void KvPages::drop_before(BlockTable& t, int64_t pos, size_t keep) {
    const size_t ps = static_cast<size_t>(cfg_.page_size);
    if (t.dropped == 0) t.kept = keep;
    SYSLM_CHECK(t.kept == keep, "KV pages: a table's kept pages changed from ", t.kept, " to ",
                keep);
    for (size_t i = t.kept + t.dropped;
         i + 1 < t.pages.size() && static_cast<int64_t>((i + 1) * ps) <= pos; ++i) {
        drop(t.pages[i]);
        t.pages[i] = -1;
        ++t.dropped;
    }
}

void KvPages::store(const BlockTable& t, int il, int64_t pos, const float* k, const float* v) {
    SYSLM_CHECK(pos >= 0 && pos < t.length && il >= 0 && il < cfg_.n_layer, "KV pages: position ",
                pos, " of layer ", il, " is outside the table (", t.length, " positions)");
    const PageId p = t.pages[static_cast<size_t>(pos / cfg_.page_size)];
    const Page& pg = pages_[static_cast<size_t>(p)];
    SYSLM_CHECK(pg.refs == 1 && !pg.published, "KV pages: page ", p, " of position ", pos,
                " is shared; append() copies it before a write");
    const size_t row = static_cast<size_t>(pos % cfg_.page_size) * row_bytes_;
    const auto& tt = kernels::type_traits(cfg_.type);
    tt.from_float(k, base(p) + il * layer_bytes_ + row, cfg_.kv_dim);
    tt.from_float(v, base(p) + (static_cast<size_t>(cfg_.n_layer) + il) * layer_bytes_ + row,
                  cfg_.kv_dim);
}

// Page and byte offset of the conv row of layer il at position pos of t.
std::pair<PageId, size_t> KvPages::conv_at(const BlockTable& t, int il, int64_t pos) const {
    SYSLM_CHECK(cfg_.conv_dim > 0 && pos >= 0 && pos < t.length && il >= 0 && il < cfg_.n_layer,
                "KV pages: no conv row for position ", pos, " of layer ", il);
    const PageId p = t.pages[static_cast<size_t>(pos / cfg_.page_size)];
    SYSLM_CHECK(p >= 0, "KV pages: the page of position ", pos, " was given back");
    const size_t row = static_cast<size_t>(cfg_.conv_dim) * elem_;
    return {p, 2 * static_cast<size_t>(cfg_.n_layer) * layer_bytes_ +
                   (static_cast<size_t>(il) * cfg_.page_size + pos % cfg_.page_size) * row};
}

const void* KvPages::conv_row(const BlockTable& t, int il, int64_t pos) const {
    const auto [p, at] = conv_at(t, il, pos);
    return base(p) + at;
}

void KvPages::store_conv(const BlockTable& t, int il, int64_t pos, const float* a) {
    const auto [p, at] = conv_at(t, il, pos);
    const Page& pg = pages_[static_cast<size_t>(p)];
    SYSLM_CHECK(pg.refs == 1 && !pg.published, "KV pages: page ", p, " of position ", pos,
                " is shared; append() copies it before a write");
    kernels::type_traits(cfg_.type).from_float(a, base(p) + at, cfg_.conv_dim);
}

int64_t KvPages::match_prefix(BlockTable& t, std::span<const int32_t> tokens, uint64_t variant) {
    SYSLM_CHECK(t.pages.empty() && t.length == 0, "KV pages: match_prefix needs an empty table");
    if (tokens.empty()) return 0;
    const size_t ps = static_cast<size_t>(cfg_.page_size);
    const size_t max_pages = (tokens.size() - 1) / ps;  // leave a token to compute
    uint64_t key = variant;
    for (size_t i = 0; i < max_pages; ++i) {
        const auto page_tokens = tokens.subspan(i * ps, ps);
        key = chain(key, page_tokens);
        const auto it = index_.find(key);
        if (it == index_.end()) break;
        const Page& pg = pages_[static_cast<size_t>(it->second)];
        if (!std::equal(page_tokens.begin(), page_tokens.end(), pg.tokens.begin())) break;
        retain(it->second);
        t.pages.push_back(it->second);
    }
    t.length = static_cast<int64_t>(t.pages.size() * ps);
    return t.length;
}

void KvPages::publish(const BlockTable& t, std::span<const int32_t> tokens, uint64_t variant) {
    if (t.dropped > 0) return;  // the chain of a prefix starts at its first page
    const size_t ps = static_cast<size_t>(cfg_.page_size);
    const size_t full =
        static_cast<size_t>(std::min<int64_t>(t.length, static_cast<int64_t>(tokens.size()))) / ps;
    uint64_t key = variant;
    for (size_t i = 0; i < full; ++i) {
        const auto page_tokens = tokens.subspan(i * ps, ps);
        key = chain(key, page_tokens);
        Page& pg = pages_[static_cast<size_t>(t.pages[i])];
        if (pg.published || index_.count(key)) continue;  // already cached, here or elsewhere
        pg.published = true;
        pg.key = key;
        pg.tokens.assign(page_tokens.begin(), page_tokens.end());
        index_[key] = t.pages[i];
    }
}

void KvPages::check_invariants(std::span<const BlockTable* const> live) const {
    std::vector<int32_t> refs(pages_.size(), 0);
    for (const BlockTable* t : live) {
        const int64_t need = (t->length + cfg_.page_size - 1) / cfg_.page_size;
        SYSLM_CHECK(static_cast<int64_t>(t->pages.size()) == need, "KV pages: a table of ",
                    t->length, " positions has ", t->pages.size(), " pages");
        for (size_t i = 0; i < t->pages.size(); ++i) {
            const PageId p = t->pages[i];
            SYSLM_CHECK((p < 0) == (i >= t->kept && i < t->kept + t->dropped), "KV pages: entry ",
                        i, " of a table with ", t->dropped, " dropped pages after ", t->kept,
                        " kept is ", p);
            if (p >= 0) ++refs[static_cast<size_t>(p)];
        }
    }
    std::vector<int> where(pages_.size(), 0);  // 1 free, 2 cached
    for (PageId p : free_) where[static_cast<size_t>(p)] += 1;
    for (PageId p : lru_) where[static_cast<size_t>(p)] += 2;
    for (size_t p = 0; p < pages_.size(); ++p) {
        const Page& pg = pages_[p];
        SYSLM_CHECK(pg.refs == refs[p], "KV pages: page ", p, " count ", pg.refs, " but ", refs[p],
                    " tables hold it");
        const int expect = pg.refs > 0 ? 0 : pg.published ? 2 : 1;
        SYSLM_CHECK(where[p] == expect, "KV pages: page ", p, " (count ", pg.refs,
                    pg.published ? ", published" : "", ") is in the wrong lists (", where[p], ")");
        if (pg.published) {
            const auto it = index_.find(pg.key);
            SYSLM_CHECK(it != index_.end() && it->second == static_cast<PageId>(p),
                        "KV pages: published page ", p, " is not indexed");
        }
    }
    for (const auto& [key, p] : index_)
        SYSLM_CHECK(
            pages_[static_cast<size_t>(p)].published && pages_[static_cast<size_t>(p)].key == key,
            "KV pages: the index names page ", p, " which is not published there");
}

}  // namespace syslm::infer
