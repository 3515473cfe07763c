#include "infer/kv_pages.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace syslm::infer {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace

int KvPagesConfig::groups() const {
    const auto n_ring = std::count(ring_layers.begin(), ring_layers.end(), true);
    return n_ring > 0 && n_ring < n_layer ? 2 : 1;
}

bool KvPagesConfig::ring_group(int g) const {
    const auto n_ring = std::count(ring_layers.begin(), ring_layers.end(), true);
    return n_ring > 0 && (g == 1 || n_ring == n_layer);
}

int KvPagesConfig::group_of(int il) const {
    return groups() == 2 && ring_layers[static_cast<size_t>(il)] ? 1 : 0;
}

int KvPagesConfig::group_layers(int g) const {
    if (groups() == 1) return n_layer;
    const int n_ring = static_cast<int>(std::count(ring_layers.begin(), ring_layers.end(), true));
    return g == 1 ? n_ring : n_layer - n_ring;
}

size_t KvPagesConfig::page_bytes(int g) const {
    const int64_t conv = g == 0 ? conv_dim * n_layer : 0;  // every layer's conv rows: group 0
    return (types.row_bytes(kv_dim) * static_cast<size_t>(group_layers(g)) +
            row_bytes(types.conv(), conv)) *
           static_cast<size_t>(page_size);
}

size_t KvPagesConfig::bytes() const {
    size_t b = 0;
    for (int g = 0; g < groups(); ++g) b += page_bytes(g) * static_cast<size_t>(group_pages(g));
    return b;
}

KvPages::KvPages(const KvPagesConfig& cfg) : cfg_(cfg) {
    SYSLM_CHECK(cfg.n_layer > 0 && cfg.kv_dim > 0 && cfg.page_size > 0 && cfg.n_pages > 0,
                "KV pages: ", cfg.n_pages, " pages of ", cfg.page_size, " positions x ",
                cfg.n_layer, " layers x ", cfg.kv_dim, " is empty");
    for (const DType t : {cfg.types.k, cfg.types.v})
        SYSLM_CHECK(cfg.kv_dim % dtype_info(t).block_size == 0, "KV pages: rows of ", cfg.kv_dim,
                    " elements are not whole blocks of ", dtype_name(t));
    SYSLM_CHECK(cfg.ring_layers.empty() || static_cast<int>(cfg.ring_layers.size()) == cfg.n_layer,
                "KV pages: ", cfg.ring_layers.size(), " ring flags for ", cfg.n_layer, " layers");
    SYSLM_CHECK(cfg.groups() == 1 || cfg.ring_pages > 0,
                "KV pages: the windowed layers' group has no pages");
    SYSLM_CHECK(cfg.keep_pages >= 0 && cfg.window >= 0, "KV pages: negative window or kept pages");
    k_row_ = row_bytes(cfg.types.k, cfg.kv_dim);
    v_row_ = row_bytes(cfg.types.v, cfg.kv_dim);
    conv_row_ = row_bytes(cfg.types.conv(), cfg.conv_dim);
    groups_.resize(static_cast<size_t>(cfg.groups()));
    for (int g = 0; g < groups(); ++g) {
        Group& G = group(g);
        G.ring = cfg.ring_group(g);
        G.n_layer = cfg.group_layers(g);
        G.k_layer_bytes = k_row_ * static_cast<size_t>(cfg.page_size);
        G.v_layer_bytes = v_row_ * static_cast<size_t>(cfg.page_size);
        G.page_bytes = cfg.page_bytes(g);
        const int n = cfg.group_pages(g);
        try {
            G.data.resize(G.page_bytes * static_cast<size_t>(n));
        } catch (const std::bad_alloc&) {
            fail("KV pages: cannot allocate ", (G.page_bytes * n) >> 20, " MiB for ", n, " pages");
        }
        G.pages.resize(static_cast<size_t>(n));
        G.free.reserve(static_cast<size_t>(n));
        for (PageId p = n - 1; p >= 0; --p) G.free.push_back(p);  // page 0 first out
    }
    if (cfg.tiers.enabled()) {
        std::vector<size_t> page_bytes;
        for (const Group& G : groups_) page_bytes.push_back(G.page_bytes);
        tiers_ = std::make_unique<PrefixTiers>(cfg.tiers, std::move(page_bytes));
    }
    int slots[BlockTable::kMaxGroups] = {};
    for (int il = 0; il < cfg.n_layer; ++il) {
        layer_group_.push_back(cfg.group_of(il));
        layer_slot_.push_back(slots[layer_group_.back()]++);
    }
}

int KvPages::pages_for_bytes(const KvPagesConfig& cfg, size_t bytes) {
    const size_t page = cfg.page_bytes();
    SYSLM_CHECK(page > 0 && bytes >= page, "KV pages: ", bytes, " bytes hold no page of ", page);
    return static_cast<int>(std::min<size_t>(bytes / page, 1u << 30));
}

int KvPages::free_pages(int g) const {
    if (g >= 0) return static_cast<int>(group(g).free.size());
    int n = 0;
    for (int i = 0; i < groups(); ++i) n += free_pages(i);
    return n;
}

int KvPages::cached_pages(int g) const {
    if (g >= 0) return static_cast<int>(group(g).lru.size());
    int n = 0;
    for (int i = 0; i < groups(); ++i) n += cached_pages(i);
    return n;
}

int KvPages::total_pages(int g) const {
    if (g >= 0) return static_cast<int>(group(g).pages.size());
    int n = 0;
    for (int i = 0; i < groups(); ++i) n += total_pages(i);
    return n;
}

int64_t KvPages::used_bytes() const {
    int64_t b = 0;
    for (int g = 0; g < groups(); ++g)
        b += static_cast<int64_t>(used_pages(g)) * static_cast<int64_t>(group(g).page_bytes);
    return b;
}

uint64_t KvPages::chain(uint64_t parent_key, std::span<const int32_t> tokens) const {
    uint64_t h = mix(parent_key ^ 0x5A17A5u);
    for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
    return h;
}

PageId KvPages::take_page(Group& g) {
    if (!g.free.empty()) {
        const PageId p = g.free.back();
        g.free.pop_back();
        return p;
    }
    if (g.lru.empty()) return -1;
    const PageId p = g.lru.front();  // evict the least recently used cached prefix page
    g.lru.pop_front();
    if (tiers_) {
        const Page& pg = g.pages[static_cast<size_t>(p)];
        tiers_->put(static_cast<int>(&g - groups_.data()), pg.key, pg.tokens, g.base(p));
    }
    unpublish(g, p);
    return p;
}

void KvPages::retain(Group& g, PageId p) {
    Page& pg = g.pages[static_cast<size_t>(p)];
    if (pg.refs == 0 && pg.published) g.lru.erase(pg.lru);  // cached -> referenced
    ++pg.refs;
}

void KvPages::drop(Group& g, PageId p) {
    Page& pg = g.pages[static_cast<size_t>(p)];
    SYSLM_CHECK(pg.refs > 0, "KV pages: page ", p, " released more often than taken");
    if (--pg.refs > 0) return;
    if (pg.published)
        pg.lru = g.lru.insert(g.lru.end(), p);  // most recently used last
    else
        g.free.push_back(p);
}

void KvPages::unpublish(Group& g, PageId p) {
    Page& pg = g.pages[static_cast<size_t>(p)];
    const auto it = g.index.find(pg.key);
    if (it != g.index.end() && it->second == p) g.index.erase(it);
    pg.published = false;
    pg.tokens.clear();
}

bool KvPages::can_append(const BlockTable& t, int64_t n) const {
    const int64_t ps = cfg_.page_size;
    const size_t new_pages = static_cast<size_t>((t.length + n + ps - 1) / ps) - t.pages(0).size();
    for (int g = 0; g < groups(); ++g) {
        const Group& G = group(g);
        const auto& pages = t.pages(g);
        const bool cow = t.length % ps != 0 && G.pages[static_cast<size_t>(pages.back())].refs > 1;
        if (new_pages + (cow ? 1 : 0) > G.free.size() + G.lru.size()) return false;
    }
    return true;
}

bool KvPages::append(BlockTable& t, int64_t n) {
    SYSLM_CHECK(n >= 0, "KV pages: cannot append ", n, " positions");
    if (n == 0) return true;
    if (!can_append(t, n)) return false;  // all or nothing: every group must have room
    const int64_t ps = cfg_.page_size, len = t.length + n;
    const size_t new_pages = static_cast<size_t>((len + ps - 1) / ps) - t.pages(0).size();
    for (int g = 0; g < groups(); ++g) {
        Group& G = group(g);
        std::vector<PageId>& pages = t.runs[static_cast<size_t>(g)].pages;
        if (t.length % ps != 0 && G.pages[static_cast<size_t>(pages.back())].refs > 1) {
            // The partly filled last page is shared: write into a copy of it.
            const PageId old = pages.back(), copy = take_page(G);
            std::memcpy(G.base(copy), G.base(old), G.page_bytes);
            retain(G, copy);
            drop(G, old);
            pages.back() = copy;
        }
        for (size_t i = 0; i < new_pages; ++i) {
            const PageId p = take_page(G);
            retain(G, p);
            pages.push_back(p);
        }
    }
    t.length = len;
    return true;
}

BlockTable KvPages::fork(const BlockTable& t) {
    for (int g = 0; g < groups(); ++g)
        for (PageId p : t.pages(g))
            if (p >= 0) retain(group(g), p);
    return t;
}

void KvPages::release(BlockTable& t) {
    for (int g = 0; g < groups(); ++g) {
        for (PageId p : t.pages(g))
            if (p >= 0) drop(group(g), p);
    }
    t = BlockTable{};
}

void KvPages::drop_before(BlockTable& t, int64_t pos) {
    const size_t ps = static_cast<size_t>(cfg_.page_size);
    for (int g = 0; g < groups(); ++g) {
        if (!group(g).ring) continue;
        PageRun& r = t.runs[static_cast<size_t>(g)];
        if (r.dropped == 0) r.kept = static_cast<size_t>(cfg_.keep_pages);
        for (size_t i = r.kept + r.dropped;
             i + 1 < r.pages.size() && static_cast<int64_t>((i + 1) * ps) <= pos; ++i) {
            drop(group(g), r.pages[i]);
            r.pages[i] = -1;
            ++r.dropped;
        }
    }
}

int64_t KvPages::held(const BlockTable& t) const {
    int64_t n = 0;
    for (int g = 0; g < groups(); ++g)
        n += t.length -
             static_cast<int64_t>(t.runs[static_cast<size_t>(g)].dropped) * cfg_.page_size;
    return n;
}

size_t KvPages::layer_offset(int il, bool value) const {
    const Group& G = group(layer_group_[static_cast<size_t>(il)]);
    const auto slot = static_cast<size_t>(layer_slot_[static_cast<size_t>(il)]);
    // The group's layers' K rows, then their V rows.
    return value ? static_cast<size_t>(G.n_layer) * G.k_layer_bytes + slot * G.v_layer_bytes
                 : slot * G.k_layer_bytes;
}

const void* KvPages::k(PageId p, int il) const {
    return group(layer_group_[static_cast<size_t>(il)]).base(p) + layer_offset(il, false);
}

const void* KvPages::v(PageId p, int il) const {
    return group(layer_group_[static_cast<size_t>(il)]).base(p) + layer_offset(il, true);
}

void KvPages::store(const BlockTable& t, int il, int64_t pos, const float* k, const float* v) {
    SYSLM_CHECK(pos >= 0 && pos < t.length && il >= 0 && il < cfg_.n_layer, "KV pages: position ",
                pos, " of layer ", il, " is outside the table (", t.length, " positions)");
    const int g = layer_group_[static_cast<size_t>(il)];
    Group& G = group(g);
    const PageId p = t.pages(g)[static_cast<size_t>(pos / cfg_.page_size)];
    SYSLM_CHECK(p >= 0, "KV pages: the page of position ", pos, " was given back");
    const Page& pg = G.pages[static_cast<size_t>(p)];
    SYSLM_CHECK(pg.refs == 1 && !pg.published, "KV pages: page ", p, " of position ", pos,
                " is shared; append() copies it before a write");
    const auto row = static_cast<size_t>(pos % cfg_.page_size);
    model::store_kv_row(cfg_.types.k, k, G.base(p) + layer_offset(il, false) + row * k_row_,
                        cfg_.kv_dim);
    model::store_kv_row(cfg_.types.v, v, G.base(p) + layer_offset(il, true) + row * v_row_,
                        cfg_.kv_dim);
}

// Page (of group 0) and byte offset of the conv row of layer il at position pos of t.
std::pair<PageId, size_t> KvPages::conv_at(const BlockTable& t, int il, int64_t pos) const {
    SYSLM_CHECK(cfg_.conv_dim > 0 && pos >= 0 && pos < t.length && il >= 0 && il < cfg_.n_layer,
                "KV pages: no conv row for position ", pos, " of layer ", il);
    const PageId p = t.pages(0)[static_cast<size_t>(pos / cfg_.page_size)];
    SYSLM_CHECK(p >= 0, "KV pages: the page of position ", pos, " was given back");
    const Group& G = group(0);
    return {p, static_cast<size_t>(G.n_layer) * (G.k_layer_bytes + G.v_layer_bytes) +
                   (static_cast<size_t>(il) * cfg_.page_size + pos % cfg_.page_size) * conv_row_};
}

const void* KvPages::conv_row(const BlockTable& t, int il, int64_t pos) const {
    const auto [p, at] = conv_at(t, il, pos);
    return group(0).base(p) + at;
}

void KvPages::store_conv(const BlockTable& t, int il, int64_t pos, const float* a) {
    const auto [p, at] = conv_at(t, il, pos);
    Group& G = group(0);
    const Page& pg = G.pages[static_cast<size_t>(p)];
    SYSLM_CHECK(pg.refs == 1 && !pg.published, "KV pages: page ", p, " of position ", pos,
                " is shared; append() copies it before a write");
    model::store_kv_row(cfg_.types.conv(), a, G.base(p) + at, cfg_.conv_dim);
}

PageId KvPages::find(const Group& g, uint64_t key, std::span<const int32_t> tokens) const {
    const auto it = g.index.find(key);
    if (it == g.index.end()) return -1;
    const Page& pg = g.pages[static_cast<size_t>(it->second)];
    return std::equal(tokens.begin(), tokens.end(), pg.tokens.begin(), pg.tokens.end()) ? it->second
                                                                                        : -1;
}

size_t KvPages::ring_first(int64_t pos, int window) const {
    const int w = window > 0 ? window : cfg_.window;
    if (w <= 0 || pos - w + 1 <= 0) return 0;
    return static_cast<size_t>((pos - w + 1) / cfg_.page_size);
}

int64_t KvPages::match_prefix(BlockTable& t, std::span<const int32_t> tokens, int window,
                              uint32_t variant) {
    SYSLM_CHECK(t.pages(0).empty() && t.length == 0, "KV pages: match_prefix needs an empty table");
    if (tokens.empty() || !cfg_.prefix_cache) return 0;
    const size_t ps = static_cast<size_t>(cfg_.page_size);
    const size_t keep = static_cast<size_t>(cfg_.keep_pages);
    size_t m = (tokens.size() - 1) / ps;  // leave a token to compute
    auto page_tokens = [&](size_t i) { return tokens.subspan(i * ps, ps); };
    std::vector<uint64_t> keys(m);
    uint64_t key = uint64_t{variant} << 32 | static_cast<uint32_t>(window);
    for (size_t i = 0; i < m; ++i) keys[i] = key = chain(key, page_tokens(i));
    // The first page a ring holds for a match of m pages (the window before position m * ps;
    // the last page always, the one the next token may share).
    auto first = [&](size_t m) { return std::min(ring_first(int64_t(m * ps), window), m - 1); };
    auto holds = [&](int g, size_t i) {
        return find(group(g), keys[i], page_tokens(i)) >= 0 || in_tiers(g, keys[i], page_tokens(i));
    };
    auto ring_holds = [&](int g, size_t m) {
        for (size_t i = 0; i < m; ++i)
            if ((i < keep || i >= first(m)) && !holds(g, i)) return false;
        return true;
    };
    for (int g = 0; g < groups(); ++g) {  // the longest match every group holds
        if (group(g).ring) {
            while (m > 0 && !ring_holds(g, m)) --m;
        } else {
            for (size_t i = 0; i < m; ++i)
                if (!holds(g, i)) m = i;
        }
    }
    lookups_.pages += static_cast<int64_t>((tokens.size() - 1) / ps);
    // A tier's page that cannot come back shortens the match: place the shorter one anew.
    for (size_t placed; (placed = place_match(t, m, keys, tokens, window)) < m;) m = placed;
    t.length = static_cast<int64_t>(m * ps);
    return t.length;
}

size_t KvPages::place_match(BlockTable& t, size_t m, std::span<const uint64_t> keys,
                            std::span<const int32_t> tokens, int window) {
    const size_t ps = static_cast<size_t>(cfg_.page_size);
    const size_t keep = static_cast<size_t>(cfg_.keep_pages);
    const size_t first = m == 0 ? 0 : std::min(ring_first(int64_t(m * ps), window), m - 1);
    constexpr PageId kInTier = -2;
    int64_t in_pool = 0;
    // The pool's pages first: retained, so that bringing the others back cannot evict them.
    for (int g = 0; g < groups(); ++g) {
        Group& G = group(g);
        PageRun& r = t.runs[static_cast<size_t>(g)];
        r = PageRun{};
        r.kept = keep;
        for (size_t i = 0; i < m; ++i) {
            if (G.ring && i >= keep && i < first) {
                r.pages.push_back(-1);
                ++r.dropped;
                continue;
            }
            const PageId p = find(G, keys[i], tokens.subspan(i * ps, ps));
            if (p >= 0) {
                retain(G, p);
                ++in_pool;
            }
            r.pages.push_back(p >= 0 ? p : kInTier);
        }
    }
    // Then the tiers' pages, into pages of the pool, published again under their keys.
    size_t cut = m;
    for (int g = 0; g < groups() && cut == m; ++g) {
        Group& G = group(g);
        PageRun& r = t.runs[static_cast<size_t>(g)];
        for (size_t i = 0; i < m; ++i) {
            if (r.pages[i] != kInTier) continue;
            const auto page_tokens = tokens.subspan(i * ps, ps);
            const PrefixTiers::Where where = tiers_->find(g, keys[i], page_tokens);
            const PageId p = take_page(G);
            if (p < 0) {
                cut = i;
                break;
            }
            if (!tiers_->take(g, keys[i], page_tokens, G.base(p))) {
                G.free.push_back(p);
                cut = i;
                break;
            }
            ++(where == PrefixTiers::Where::Ram ? lookups_.ram : lookups_.disk);
            retain(G, p);  // before it is published: a published page at 0 refs is in the LRU
            Page& pg = G.pages[static_cast<size_t>(p)];
            pg.published = true;
            pg.key = keys[i];
            pg.tokens.assign(page_tokens.begin(), page_tokens.end());
            G.index[keys[i]] = p;
            r.pages[i] = p;
        }
    }
    if (cut == m) {
        lookups_.pool += in_pool;
        return m;
    }
    // Undo: every page this attempt holds goes back (the restored ones stay cached).
    for (int g = 0; g < groups(); ++g) {
        for (PageId p : t.runs[static_cast<size_t>(g)].pages)
            if (p >= 0) drop(group(g), p);
        t.runs[static_cast<size_t>(g)] = PageRun{};
    }
    return cut;
}

void KvPages::publish(const BlockTable& t, std::span<const int32_t> tokens, int window,
                      uint32_t variant) {
    if (!cfg_.prefix_cache) return;
    const size_t ps = static_cast<size_t>(cfg_.page_size);
    const size_t full =
        static_cast<size_t>(std::min<int64_t>(t.length, static_cast<int64_t>(tokens.size()))) / ps;
    uint64_t key = uint64_t{variant} << 32 | static_cast<uint32_t>(window);
    for (size_t i = 0; i < full; ++i) {
        const auto page_tokens = tokens.subspan(i * ps, ps);
        key = chain(key, page_tokens);
        for (int g = 0; g < groups(); ++g) {
            Group& G = group(g);
            const PageId p = t.pages(g)[i];
            if (p < 0) continue;  // given back: not this table's to publish
            Page& pg = G.pages[static_cast<size_t>(p)];
            if (pg.published || G.index.count(key)) continue;  // already cached somewhere
            pg.published = true;
            pg.key = key;
            pg.tokens.assign(page_tokens.begin(), page_tokens.end());
            G.index[key] = p;
        }
    }
}

void KvPages::check_run(const BlockTable& t, int g, std::vector<int32_t>& refs) const {
    const PageRun& r = t.runs[static_cast<size_t>(g)];
    const int64_t need = (t.length + cfg_.page_size - 1) / cfg_.page_size;
    SYSLM_CHECK(static_cast<int64_t>(r.pages.size()) == need, "KV pages: a table of ", t.length,
                " positions has ", r.pages.size(), " pages in group ", g);
    SYSLM_CHECK(r.dropped == 0 || group(g).ring, "KV pages: group ", g,
                " is not a ring but a table dropped ", r.dropped, " of its pages");
    for (size_t i = 0; i < r.pages.size(); ++i) {
        const PageId p = r.pages[i];
        SYSLM_CHECK((p < 0) == (i >= r.kept && i < r.kept + r.dropped), "KV pages: entry ", i,
                    " of group ", g, " in a table with ", r.dropped, " dropped pages after ",
                    r.kept, " kept is ", p);
        if (p >= 0) ++refs[static_cast<size_t>(p)];
    }
}

void KvPages::check_invariants(std::span<const BlockTable* const> live) const {
    for (int g = 0; g < groups(); ++g) {
        const Group& G = group(g);
        std::vector<int32_t> refs(G.pages.size(), 0);
        for (const BlockTable* t : live) check_run(*t, g, refs);
        std::vector<int> where(G.pages.size(), 0);  // 1 free, 2 cached
        for (PageId p : G.free) where[static_cast<size_t>(p)] += 1;
        for (PageId p : G.lru) where[static_cast<size_t>(p)] += 2;
        for (size_t p = 0; p < G.pages.size(); ++p) {
            const Page& pg = G.pages[p];
            SYSLM_CHECK(pg.refs == refs[p], "KV pages: page ", p, " of group ", g, " count ",
                        pg.refs, " but ", refs[p], " tables hold it");
            const int expect = pg.refs > 0 ? 0 : pg.published ? 2 : 1;
            SYSLM_CHECK(where[p] == expect, "KV pages: page ", p, " of group ", g, " (count ",
                        pg.refs, pg.published ? ", published" : "", ") is in the wrong lists (",
                        where[p], ")");
            if (pg.published) {
                const auto it = G.index.find(pg.key);
                SYSLM_CHECK(it != G.index.end() && it->second == static_cast<PageId>(p),
                            "KV pages: published page ", p, " of group ", g, " is not indexed");
            }
        }
        for (const auto& [key, p] : G.index)
            SYSLM_CHECK(G.pages[static_cast<size_t>(p)].published &&
                            G.pages[static_cast<size_t>(p)].key == key,
                        "KV pages: the index of group ", g, " names page ", p,
                        " which is not published there");
    }
}

}  // namespace syslm::infer
