// The paged KV pool (infer/kv_pages.hpp): O(1) pages that come back, fork shares and
// copy-on-write separates, prefix pages found only for the same whole prefix, cached pages
// evicted least recently used first, all-or-nothing appends, and 100k random operations that
// keep every invariant and leak nothing.
#include "infer/kv_pages.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"

namespace syslm::infer {
namespace {

// ring: "" (one group), "all" (every layer windowed: one ring group), "mixed" (layers 0 and 2
// windowed: their own ring group of ring_pages).
KvPagesConfig config(int n_pages, model::KvTypes type = DType::F32, const std::string& ring = "",
                     int ring_pages = 0, int keep_pages = 0) {
    KvPagesConfig c;
    if (ring == "all") c.ring_layers = {true, true, true};
    if (ring == "mixed") c.ring_layers = {true, false, true};
    c.ring_pages = ring_pages;
    c.window = 6;
    c.keep_pages = keep_pages;
    c.n_layer = 3;
    c.kv_dim = 10;
    c.page_size = 4;
    c.n_pages = n_pages;
    c.types = type;
    return c;
}

// Row `pos` of layer il: values that say where they belong.
std::vector<float> row(int il, int64_t pos, float tag) {
    std::vector<float> r(10);
    for (int d = 0; d < 10; ++d) r[d] = tag + il * 1000.0f + static_cast<float>(pos) + 0.01f * d;
    return r;
}

float read(const KvPages& kv, const BlockTable& t, int il, int64_t pos, int d, bool value) {
    const PageId p = kv.pages_of(t, il)[static_cast<size_t>(pos / 4)];
    const auto* rows = static_cast<const float*>(value ? kv.v(p, il) : kv.k(p, il));
    return rows[(pos % 4) * 10 + d];
}

void fill(KvPages& kv, const BlockTable& t, int64_t from, float tag) {
    for (int64_t pos = from; pos < t.length; ++pos)
        for (int il = 0; il < 3; ++il) {
            const auto k = row(il, pos, tag), v = row(il, pos, tag + 0.5f);
            kv.store(t, il, pos, k.data(), v.data());
        }
}

TEST(KvPages, AppendAllocatesPagesAndReleaseReturnsThem) {
    KvPages kv(config(5));
    BlockTable a;
    ASSERT_TRUE(kv.append(a, 1));
    EXPECT_EQ(a.pages().size(), 1u);
    ASSERT_TRUE(kv.append(a, 7));  // 8 positions: 2 pages
    EXPECT_EQ(a.pages().size(), 2u);
    EXPECT_EQ(kv.free_pages(), 3);
    fill(kv, a, 0, 1.0f);
    EXPECT_EQ(read(kv, a, 2, 6, 3, false), 1.0f + 2000 + 6 + 0.03f);
    EXPECT_EQ(read(kv, a, 1, 5, 0, true), 1.5f + 1000 + 5);
    BlockTable b;
    EXPECT_FALSE(kv.append(b, 13));  // needs 4 of the 3 left: nothing taken
    EXPECT_TRUE(b.pages().empty());
    EXPECT_EQ(kv.free_pages(), 3);
    kv.release(a);
    EXPECT_EQ(kv.free_pages(), 5);
    EXPECT_THROW(kv.store(a, 0, 0, nullptr, nullptr), Error);
}

TEST(KvPages, ForkSharesAndCopyOnWriteSeparates) {
    KvPages kv(config(8));
    BlockTable a;
    ASSERT_TRUE(kv.append(a, 6));  // one full page + 2 positions
    fill(kv, a, 0, 1.0f);
    BlockTable b = kv.fork(a);
    EXPECT_EQ(kv.used_pages(), 2);
    EXPECT_EQ(kv.ref_count(a.pages()[1]), 2);
    const std::vector<float> x(10, 7.0f);
    EXPECT_THROW(kv.store(b, 0, 5, x.data(), x.data()), Error);  // shared: not writable

    ASSERT_TRUE(kv.append(b, 1));  // into the shared half page: copied first
    EXPECT_EQ(b.pages()[0], a.pages()[0]);
    EXPECT_NE(b.pages()[1], a.pages()[1]);
    EXPECT_EQ(kv.ref_count(a.pages()[1]), 1);
    fill(kv, b, 6, 9.0f);
    for (int il = 0; il < 3; ++il)
        for (int64_t pos = 0; pos < 6; ++pos)  // the copy kept a's rows
            EXPECT_EQ(read(kv, b, il, pos, 4, true), read(kv, a, il, pos, 4, true));
    EXPECT_EQ(read(kv, b, 0, 6, 0, false), 9.0f + 6);
    ASSERT_TRUE(kv.append(a, 1));  // a's own page now: no copy
    EXPECT_EQ(kv.used_pages(), 3);
    const BlockTable* live[] = {&a, &b};
    kv.check_invariants(live);
    kv.release(a);
    kv.release(b);
    EXPECT_EQ(kv.free_pages(), 8);
}

TEST(KvPages, PrefixPagesMatchOnlyTheSameWholePrefix) {
    KvPages kv(config(16, DType::F16));
    std::vector<int32_t> prompt(11);
    for (int i = 0; i < 11; ++i) prompt[i] = 100 + i;
    BlockTable a;
    EXPECT_EQ(kv.match_prefix(a, prompt), 0);
    ASSERT_TRUE(kv.append(a, 11));
    fill(kv, a, 0, 1.0f);
    kv.publish(a, prompt);  // pages 0 and 1 are full

    BlockTable b;  // same 11 tokens: 2 pages, and the 11th token is left to compute
    EXPECT_EQ(kv.match_prefix(b, prompt), 8);
    EXPECT_EQ(b.pages()[0], a.pages()[0]);
    EXPECT_EQ(b.pages()[1], a.pages()[1]);

    std::vector<int32_t> other = prompt;
    other[5] = 7;  // differs in the second page
    BlockTable c;
    EXPECT_EQ(kv.match_prefix(c, other), 4);
    std::vector<int32_t> shifted(prompt.begin() + 4, prompt.end());  // page 1's tokens first
    BlockTable d;
    EXPECT_EQ(kv.match_prefix(d, shifted), 0) << "a page matches only at its own prefix";
    std::vector<int32_t> exact(prompt.begin(), prompt.begin() + 8);
    BlockTable e;
    EXPECT_EQ(kv.match_prefix(e, exact), 4) << "the last token is always computed";

    const BlockTable* live[] = {&a, &b, &c, &d, &e};
    kv.check_invariants(live);
    for (BlockTable* t : {&a, &b, &c, &d, &e}) kv.release(*t);
    EXPECT_EQ(kv.cached_pages(), 2);  // published pages stay cached
    BlockTable f;
    EXPECT_EQ(kv.match_prefix(f, prompt), 8);
    kv.release(f);
}

TEST(KvPages, CachedPagesAreEvictedLeastRecentlyUsedFirst) {
    KvPages kv(config(4));
    std::vector<std::vector<int32_t>> prompts;
    for (int s = 0; s < 4; ++s) {
        prompts.push_back({s, s, s, s, 99});
        BlockTable t;
        ASSERT_TRUE(kv.append(t, 4));
        fill(kv, t, 0, static_cast<float>(s));
        kv.publish(t, prompts.back());
        kv.release(t);  // cached, in order 0, 1, 2, 3
    }
    EXPECT_EQ(kv.cached_pages(), 4);
    BlockTable hit;
    EXPECT_EQ(kv.match_prefix(hit, prompts[0]), 4);  // 0 used again: now most recent
    kv.release(hit);
    BlockTable t;
    ASSERT_TRUE(kv.append(t, 8));  // two pages: evicts 1 and 2
    BlockTable probe;
    for (int s : {1, 2}) {
        EXPECT_EQ(kv.match_prefix(probe, prompts[s]), 0) << s;
        kv.release(probe);
    }
    for (int s : {0, 3}) {
        EXPECT_EQ(kv.match_prefix(probe, prompts[s]), 4) << s;
        kv.release(probe);
    }
    kv.release(t);
}

// Layers 0 and 2 windowed, layer 1 global: each group has its own pages; a ring gives back pages
// before the window while the global group keeps them; an append needs room in both groups.
TEST(KvPages, LocalAndGlobalLayersKeepTheirOwnGroups) {
    KvPages kv(config(8, DType::F32, "mixed", 4));
    ASSERT_EQ(kv.groups(), 2);
    EXPECT_EQ(kv.config().page_bytes(0), 4u * 4 * 10 * 2 * 1);
    EXPECT_EQ(kv.config().page_bytes(1), 4u * 4 * 10 * 2 * 2);
    BlockTable a;
    ASSERT_TRUE(kv.append(a, 10));  // 3 pages in each group
    EXPECT_EQ(kv.used_pages(0), 3);
    EXPECT_EQ(kv.used_pages(1), 3);
    fill(kv, a, 0, 1.0f);
    for (int il = 0; il < 3; ++il)
        for (int64_t pos = 0; pos < 10; ++pos)
            EXPECT_EQ(read(kv, a, il, pos, 7, true), 1.5f + il * 1000 + pos + 0.07f);
    kv.drop_before(a, 9);  // pages 0 and 1 end at or before 9: the ring gives them back
    EXPECT_EQ(kv.used_pages(0), 3);
    EXPECT_EQ(kv.used_pages(1), 1);
    EXPECT_EQ(kv.held(a), 10 + 2);
    for (int il = 0; il < 3; ++il)  // what is held is intact
        EXPECT_EQ(read(kv, a, il, 9, 2, false), 1.0f + il * 1000 + 9 + 0.02f);
    BlockTable b;
    EXPECT_FALSE(kv.append(b, 13)) << "4 ring pages needed, 3 free: nothing taken";
    EXPECT_TRUE(b.pages(0).empty());
    EXPECT_EQ(kv.used_pages(0), 3);
    ASSERT_TRUE(kv.append(b, 12));
    const BlockTable* live[] = {&a, &b};
    kv.check_invariants(live);
    kv.release(a);
    kv.release(b);
    EXPECT_EQ(kv.free_pages(), 12);
}

// A ring matches a cached prefix with the pages of the window before the match point (and its
// kept ones): the others are entered as given back. Global layers need every page.
TEST(KvPages, ARingMatchesAPrefixWithOnlyItsWindowsPages) {
    for (const int keep : {0, 1}) {
        KvPages kv(config(16, DType::F32, "mixed", 16, keep));
        std::vector<int32_t> prompt(28);
        for (int i = 0; i < 28; ++i) prompt[i] = 50 + i;
        BlockTable a;
        ASSERT_TRUE(kv.append(a, 23));
        fill(kv, a, 0, 1.0f);
        kv.drop_before(a, 13);  // ring pages 0..2 (less the kept one) given back unpublished
        kv.publish(a, prompt);  // the other 5 full pages, in both groups
        kv.release(a);
        BlockTable b;  // 5 pages match: the window of 6 before position 20 is in pages 3 and 4
        EXPECT_EQ(kv.match_prefix(b, prompt), 20) << keep;
        EXPECT_EQ(b.runs[1].dropped, 3u - keep);
        for (size_t i = 0; i < 5; ++i) {
            EXPECT_GE(b.pages(0)[i], 0);
            EXPECT_EQ(b.pages(1)[i] >= 0, i < static_cast<size_t>(keep) || i >= 3) << i;
        }
        EXPECT_EQ(kv.held(b), 20 + 20 - 4 * (3 - keep));
        ASSERT_TRUE(kv.append(b, 8));
        fill(kv, b, 20, 2.0f);
        const BlockTable* live[] = {&b};
        kv.check_invariants(live);
        BlockTable c;
        EXPECT_EQ(kv.match_prefix(c, prompt, 3), 0) << "another window's K/V differ";
        kv.release(b);
        kv.release(c);
    }
    // Without the window's pages no match: the ring's page 3 was given back unpublished.
    KvPages kv(config(16, DType::F32, "mixed", 16));
    std::vector<int32_t> prompt(28, 9);
    BlockTable a;
    ASSERT_TRUE(kv.append(a, 23));
    kv.drop_before(a, 17);
    kv.publish(a, prompt);
    kv.release(a);
    BlockTable b;
    EXPECT_EQ(kv.match_prefix(b, prompt), 0);
    kv.release(b);
}

// 100k random operations on one group, a ring of every layer, and local/global groups (with and
// without a kept page): the invariants hold and nothing leaks.
// Prefix tiers: pages the pool evicts go to RAM (2 pages here), then to disk (3), and a match
// brings them back with the bytes they had; a disk page whose file was damaged is a miss.
TEST(KvPages, EvictedPrefixPagesComeBackFromRamAndDiskWithTheirBytes) {
    for (const bool damage : {false, true}) {
        KvPagesConfig c = config(4);
        const size_t page = c.page_bytes();
        c.tiers.ram_bytes = 2 * page;
        c.tiers.disk_dir = std::string(SYSLM_TEST_TMP) + "/kv_tiers";
        c.tiers.disk_bytes = 3 * page + page / 2;
        {
            KvPages kv(c);
            std::vector<int32_t> a(17), b(17);
            for (int i = 0; i < 17; ++i) {
                a[i] = 100 + i;
                b[i] = 200 + i;
            }
            BlockTable ta;
            ASSERT_TRUE(kv.append(ta, 16));
            fill(kv, ta, 0, 1.0f);
            kv.publish(ta, a);
            std::vector<float> want;
            for (int il = 0; il < 3; ++il)
                for (int64_t pos = 0; pos < 16; ++pos)
                    for (int d = 0; d < 10; ++d) want.push_back(read(kv, ta, il, pos, d, true));
            kv.release(ta);  // 4 cached pages
            BlockTable tb;
            ASSERT_TRUE(kv.append(tb, 16));  // evicts all 4: 2 stay in RAM, 2 go on to disk
            PrefixTierStats st = kv.tier_stats();
            EXPECT_EQ(st.stored, 4);
            EXPECT_EQ(st.ram_pages, 2);
            EXPECT_EQ(st.disk_pages, 2);
            EXPECT_EQ(st.spilled, 2);
            kv.release(tb);
            if (damage) {  // flip a byte of one page file
                namespace fs = std::filesystem;
                for (const auto& f : fs::recursive_directory_iterator(c.tiers.disk_dir)) {
                    if (!f.is_regular_file()) continue;
                    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
                    io.seekp(100);
                    io.put('\x7f');
                    break;
                }
            }
            BlockTable t;
            const int64_t matched = kv.match_prefix(t, a);
            const PrefixLookups& l = kv.prefix_lookups();
            EXPECT_EQ(l.pages, 4);
            if (!damage) {
                ASSERT_EQ(matched, 16);
                EXPECT_EQ(l.ram, 2);
                EXPECT_EQ(l.disk, 2);
                std::vector<float> got;
                for (int il = 0; il < 3; ++il)
                    for (int64_t pos = 0; pos < 16; ++pos)
                        for (int d = 0; d < 10; ++d) got.push_back(read(kv, t, il, pos, d, true));
                EXPECT_EQ(got, want);
                EXPECT_EQ(kv.tier_stats().ram_pages + kv.tier_stats().disk_pages, 0);
            } else {
                // The damaged page ends the match there (the disk pages are the first two).
                EXPECT_LT(matched, 16);
                EXPECT_EQ(kv.tier_stats().bad_files, 1);
            }
            const BlockTable* live[] = {&t};
            kv.check_invariants(live);
            kv.release(t);
        }
        // The tiers' folder goes with them.
        for (const auto& f : std::filesystem::directory_iterator(c.tiers.disk_dir))
            ADD_FAILURE() << "left behind: " << f.path();
    }
}

TEST(KvPages, RandomOperationsKeepInvariantsAndLeakNothing) {
    for (const auto& [ring, keep, tiers] :
         {std::tuple{"", 0, false}, std::tuple{"all", 1, false}, std::tuple{"mixed", 0, false},
          std::tuple{"mixed", 1, false}, std::tuple{"", 0, true}, std::tuple{"mixed", 1, true}}) {
        KvPagesConfig c = config(64, DType::F32, ring, 40, keep);
        if (tiers) {
            c.tiers.ram_bytes = 3 * c.page_bytes();
            c.tiers.disk_dir = std::string(SYSLM_TEST_TMP) + "/kv_tiers_random";
            c.tiers.disk_bytes = 6 * c.page_bytes();
        }
        KvPages kv(c);
        std::mt19937 rng(123);
        std::vector<BlockTable> tables;
        std::vector<std::vector<int32_t>> tokens;  // each table's tokens so far
        auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
        int hits = 0, refused = 0, evicted = 0, dropped = 0;
        for (int op = 0; op < 100000; ++op) {
            const int kind = static_cast<int>(rng() % 100);
            if (kind < 30 || tables.empty()) {  // new sequence, maybe from a cached prefix
                std::vector<int32_t> prompt(1 + pick(20));
                for (auto& x : prompt) x = static_cast<int32_t>(rng() % 3);  // few distinct
                BlockTable t;
                const int64_t matched = kv.match_prefix(t, prompt);
                hits += matched > 0;
                const int cached = kv.cached_pages();
                if (kv.append(t, static_cast<int64_t>(prompt.size()) - matched)) {
                    evicted += kv.cached_pages() < cached && kv.free_pages() == 0;
                    tables.push_back(t);
                    tokens.push_back(prompt);
                    if (rng() % 2) kv.publish(tables.back(), tokens.back());
                } else {
                    ++refused;
                    kv.release(t);
                }
            } else if (kind < 60) {  // decode
                const size_t i = pick(tables.size());
                if (kv.append(tables[i], 1)) tokens[i].push_back(static_cast<int32_t>(rng() % 3));
            } else if (kind < 64) {  // a ring's pages before the window go back
                const size_t i = pick(tables.size());
                const PageRun& r = tables[i].runs[kv.groups() - 1];
                const size_t was = r.dropped;
                kv.drop_before(tables[i], tables[i].length - static_cast<int64_t>(pick(12)));
                dropped += r.dropped > was;
                ASSERT_TRUE(r.dropped == 0 || r.kept + r.dropped < r.pages.size());
                if (keep > 0 && !r.pages.empty()) {
                    ASSERT_GE(r.pages[0], 0);
                }
                ASSERT_LE(kv.held(tables[i]), tables[i].length * kv.groups());
            } else if (kind < 70) {  // fork (n > 1 completions)
                const size_t i = pick(tables.size());
                tables.push_back(kv.fork(tables[i]));
                tokens.push_back(tokens[i]);
            } else {  // finish or preempt
                const size_t i = pick(tables.size());
                kv.release(tables[i]);
                tables.erase(tables.begin() + static_cast<ptrdiff_t>(i));
                tokens.erase(tokens.begin() + static_cast<ptrdiff_t>(i));
            }
            if (op % 997 == 0) {
                std::vector<const BlockTable*> live;
                for (const auto& t : tables) live.push_back(&t);
                kv.check_invariants(live);
            }
        }
        EXPECT_GT(hits, 100) << ring;  // the paths under test all ran
        EXPECT_EQ(dropped > 100, std::string(ring) != "") << ring;
        EXPECT_GT(refused, 100) << ring;
        EXPECT_GT(evicted, 100) << ring;
        if (tiers) {
            EXPECT_GT(kv.prefix_lookups().ram, 25) << ring;  // 82 and 295 when written
            EXPECT_GT(kv.prefix_lookups().disk, 50) << ring;
        }
        for (auto& t : tables) kv.release(t);
        kv.check_invariants({});
        EXPECT_EQ(kv.used_pages(), 0);
        EXPECT_EQ(kv.free_pages() + kv.cached_pages(), kv.total_pages());
    }
}

}  // namespace
}  // namespace syslm::infer
