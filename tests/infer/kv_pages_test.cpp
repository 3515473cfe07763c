// The paged KV pool (infer/kv_pages.hpp): O(1) pages that come back, fork shares and
// copy-on-write separates, prefix pages found only for the same whole prefix, cached pages
// evicted least recently used first, all-or-nothing appends, and 100k random operations that
// keep every invariant and leak nothing.
#include "infer/kv_pages.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"

namespace syslm::infer {
namespace {

KvPagesConfig config(int n_pages, DType type = DType::F32) {
    KvPagesConfig c;
    c.n_layer = 3;
    c.kv_dim = 10;
    c.page_size = 4;
    c.n_pages = n_pages;
    c.type = type;
    return c;
}

// Row `pos` of layer il: values that say where they belong.
std::vector<float> row(int il, int64_t pos, float tag) {
    std::vector<float> r(10);
    for (int d = 0; d < 10; ++d) r[d] = tag + il * 1000.0f + static_cast<float>(pos) + 0.01f * d;
    return r;
}

float read(const KvPages& kv, const BlockTable& t, int il, int64_t pos, int d, bool value) {
    const PageId p = t.pages[static_cast<size_t>(pos / 4)];
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
    EXPECT_EQ(a.pages.size(), 1u);
    ASSERT_TRUE(kv.append(a, 7));  // 8 positions: 2 pages
    EXPECT_EQ(a.pages.size(), 2u);
    EXPECT_EQ(kv.free_pages(), 3);
    fill(kv, a, 0, 1.0f);
    EXPECT_EQ(read(kv, a, 2, 6, 3, false), 1.0f + 2000 + 6 + 0.03f);
    EXPECT_EQ(read(kv, a, 1, 5, 0, true), 1.5f + 1000 + 5);
    BlockTable b;
    EXPECT_FALSE(kv.append(b, 13));  // needs 4 of the 3 left: nothing taken
    EXPECT_TRUE(b.pages.empty());
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
    EXPECT_EQ(kv.ref_count(a.pages[1]), 2);
    const std::vector<float> x(10, 7.0f);
    EXPECT_THROW(kv.store(b, 0, 5, x.data(), x.data()), Error);  // shared: not writable

    ASSERT_TRUE(kv.append(b, 1));  // into the shared half page: copied first
    EXPECT_EQ(b.pages[0], a.pages[0]);
    EXPECT_NE(b.pages[1], a.pages[1]);
    EXPECT_EQ(kv.ref_count(a.pages[1]), 1);
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
    EXPECT_EQ(b.pages[0], a.pages[0]);
    EXPECT_EQ(b.pages[1], a.pages[1]);

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

TEST(KvPages, RandomOperationsKeepInvariantsAndLeakNothing) {
    KvPages kv(config(64));
    std::mt19937 rng(123);
    std::vector<BlockTable> tables;
    std::vector<std::vector<int32_t>> tokens;  // each table's tokens so far
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    int hits = 0, refused = 0, evicted = 0, dropped = 0;
    for (int op = 0; op < 100000; ++op) {
        const int kind = static_cast<int>(rng() % 100);
        if (kind < 30 || tables.empty()) {  // new sequence, maybe from a cached prefix
            std::vector<int32_t> prompt(1 + pick(20));
            for (auto& x : prompt) x = static_cast<int32_t>(rng() % 3);  // few distinct: hits
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
        } else if (kind < 64) {  // a windowed model's pages before the window go back
            const size_t i = pick(tables.size());
            const int64_t before = tables[i].length - static_cast<int64_t>(pick(12));
            const size_t was = tables[i].dropped;
            // Some tables keep their first page (global tokens), set by their first drop.
            const size_t keep = was > 0 ? tables[i].kept : pick(2);
            kv.drop_before(tables[i], before, keep);
            dropped += tables[i].dropped > was;
            ASSERT_TRUE(tables[i].dropped == 0 ||
                        tables[i].kept + tables[i].dropped < tables[i].pages.size());
            if (keep > 0 && !tables[i].pages.empty()) ASSERT_GE(tables[i].pages[0], 0);
            ASSERT_LE(kv.held(tables[i]), tables[i].length);
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
    EXPECT_GT(hits, 100);  // the paths under test all ran
    EXPECT_GT(dropped, 100);
    EXPECT_GT(refused, 100);
    EXPECT_GT(evicted, 100);
    for (auto& t : tables) kv.release(t);
    kv.check_invariants({});
    EXPECT_EQ(kv.used_pages(), 0);
    EXPECT_EQ(kv.free_pages() + kv.cached_pages(), 64);
}

}  // namespace
}  // namespace syslm::infer
