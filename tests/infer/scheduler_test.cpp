// Continuous batching decisions (infer/scheduler.hpp) on a real page pool: the token budget and
// chunked prefill, running slots, the bounded waiting queue, first come first served,
// preemption of the newest sequence when pages run out (and its recompute later), sequences too
// long for the pool, prefix hits, and priorities.
#include "infer/scheduler.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace syslm::infer {
namespace {

KvPagesConfig pool(int n_pages) {
    KvPagesConfig c;
    c.n_layer = 1;
    c.kv_dim = 4;
    c.page_size = 4;
    c.n_pages = n_pages;
    return c;
}

Sequence seq(int64_t id, int n, int32_t first = 0) {
    Sequence s;
    s.id = id;
    for (int i = 0; i < n; ++i) s.tokens.push_back(first + i);
    s.n_prompt = n;
    return s;
}

int64_t work_of(const std::vector<ScheduledWork>& w, const Sequence& s) {
    for (const auto& x : w)
        if (x.seq == &s) return x.n;
    return 0;
}

// What the engine does after a step: positions computed, a token sampled where a row ended
// the sequence's pending tokens.
void step_done(Scheduler& sch, const std::vector<ScheduledWork>& w) {
    sch.completed(w);
    for (const auto& x : w)
        if (x.seq->computed == static_cast<int64_t>(x.seq->tokens.size()))
            x.seq->tokens.push_back(7);
}

TEST(Scheduler, BudgetChunksPromptsAndDecodesFirstComeFirstServed) {
    KvPages pages(pool(256));
    Scheduler sch({512, 16, 8}, pages);
    Sequence a = seq(1, 300), b = seq(2, 300), c = seq(3, 10);
    for (Sequence* s : {&a, &b, &c}) ASSERT_TRUE(sch.submit(s));
    auto w = sch.schedule();
    EXPECT_EQ(work_of(w, a), 300);
    EXPECT_EQ(work_of(w, b), 212);  // the rest of the budget: a chunk
    EXPECT_EQ(work_of(w, c), 0);
    step_done(sch, w);
    w = sch.schedule();
    EXPECT_EQ(work_of(w, a), 1);   // decode
    EXPECT_EQ(work_of(w, b), 88);  // the rest of its prompt
    EXPECT_EQ(work_of(w, c), 10);
    step_done(sch, w);
    for (Sequence* s : {&a, &b, &c}) EXPECT_EQ(s->computed + 1, int64_t(s->tokens.size()));
}

TEST(Scheduler, SlotsAndTheWaitingQueueAreBounded) {
    KvPages pages(pool(256));
    Scheduler sch({512, 2, 3}, pages);
    std::vector<Sequence> s;
    for (int i = 0; i < 4; ++i) s.push_back(seq(i, 5));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(sch.submit(&s[i]));
    EXPECT_FALSE(sch.submit(&s[3]));  // queue full: the server answers 429
    const auto w = sch.schedule();
    EXPECT_EQ(w.size(), 2u);  // two slots
    EXPECT_EQ(sch.waiting().size(), 1u);
    EXPECT_TRUE(sch.submit(&s[3]));
    sch.remove(&s[0]);
    EXPECT_EQ(sch.running().size(), 1u);
}

TEST(Scheduler, PreemptsTheNewestWhenPagesRunOutAndRecomputesItLater) {
    KvPages pages(pool(6));  // 24 positions
    Scheduler sch({512, 16, 8}, pages);
    Sequence a = seq(1, 10), b = seq(2, 10, 100);
    ASSERT_TRUE(sch.submit(&a));
    ASSERT_TRUE(sch.submit(&b));
    auto w = sch.schedule();
    ASSERT_EQ(w.size(), 2u);  // 3 + 3 pages
    step_done(sch, w);
    w = sch.schedule();  // positions 10 -> 11 fit in the third pages
    step_done(sch, w);
    w = sch.schedule();  // 11 -> 12 still fits
    step_done(sch, w);
    EXPECT_EQ(pages.free_pages(), 0);
    w = sch.schedule();  // a needs a 4th page: b, the newest, is preempted
    EXPECT_EQ(work_of(w, a), 1);
    EXPECT_EQ(work_of(w, b), 0);
    EXPECT_EQ(sch.preemptions(), 1);
    EXPECT_EQ(b.computed, 0);
    ASSERT_EQ(sch.waiting().size(), 1u);
    EXPECT_EQ(sch.waiting().front(), &b);
    step_done(sch, w);
    sch.remove(&a);  // a finishes: b comes back and recomputes prompt + generated tokens
    w = sch.schedule();
    EXPECT_EQ(work_of(w, b), int64_t(b.tokens.size()));
    EXPECT_EQ(b.tokens.size(), 13u);
}

// Priorities (lower first): the waiting queue is ordered by them; a more urgent request takes
// the slot of the least urgent newest running one, and its pages when the pool is full, and runs
// in the same step; a request of equal priority waits its turn.
TEST(Scheduler, AMoreUrgentRequestPreemptsForItsSlotAndPages) {
    {  // slots
        KvPages pages(pool(64));
        Scheduler sch({512, 2, 8}, pages);
        Sequence a = seq(1, 5), b = seq(2, 5), c = seq(3, 5), d = seq(4, 5), e = seq(5, 5);
        ASSERT_TRUE(sch.submit(&a));
        ASSERT_TRUE(sch.submit(&b));
        auto w = sch.schedule();
        step_done(sch, w);
        c.priority = -1;
        d.priority = 1;
        ASSERT_TRUE(sch.submit(&d));
        ASSERT_TRUE(sch.submit(&e));  // priority 0, after d in arrival but before it in order
        ASSERT_TRUE(sch.submit(&c));
        EXPECT_EQ(sch.waiting().front(), &c);
        w = sch.schedule();
        EXPECT_EQ(work_of(w, c), 5);  // admitted: b (newest of priority 0) gave its slot
        EXPECT_EQ(work_of(w, a), 1);
        EXPECT_EQ(work_of(w, b), 0);
        EXPECT_EQ(sch.preemptions(), 1);
        ASSERT_EQ(sch.running().size(), 2u);
        EXPECT_EQ(sch.running().front(), &c);
        const std::vector<Sequence*> order(sch.waiting().begin(), sch.waiting().end());
        EXPECT_EQ(order, (std::vector<Sequence*>{&b, &e, &d}));
        step_done(sch, w);
        w = sch.schedule();  // e (priority 0) does not preempt a (priority 0)
        EXPECT_EQ(sch.preemptions(), 1);
        EXPECT_EQ(work_of(w, e), 0);
    }
    {  // pages: a holds 3 of the 4; the urgent b needs 2 and takes a's
        KvPages pages(pool(4));
        Scheduler sch({512, 16, 8}, pages);
        Sequence a = seq(1, 12), b = seq(2, 6, 100);
        ASSERT_TRUE(sch.submit(&a));
        auto w = sch.schedule();
        step_done(sch, w);
        EXPECT_EQ(pages.free_pages(), 1);
        b.priority = -5;
        ASSERT_TRUE(sch.submit(&b));
        w = sch.schedule();
        EXPECT_EQ(work_of(w, b), 6);
        EXPECT_EQ(work_of(w, a), 0);
        EXPECT_EQ(a.computed, 0);
        EXPECT_EQ(sch.waiting().front(), &a);
    }
}

TEST(Scheduler, RejectsWhatCannotFitAloneAndCountsPrefixHits) {
    KvPages pages(pool(6));
    Scheduler sch({512, 16, 8}, pages);
    Sequence big = seq(1, 30), a = seq(2, 9), b = seq(3, 9);
    ASSERT_TRUE(sch.submit(&big));
    ASSERT_TRUE(sch.submit(&a));
    auto w = sch.schedule();
    const auto rejected = sch.take_rejected();
    ASSERT_EQ(rejected.size(), 1u);
    EXPECT_TRUE(big.too_long);
    EXPECT_EQ(work_of(w, a), 9);
    step_done(sch, w);
    pages.publish(a.table, a.tokens);
    ASSERT_TRUE(sch.submit(&b));  // same 9-token prompt: two full pages cached
    w = sch.schedule();
    EXPECT_EQ(work_of(w, b), 1);
    EXPECT_EQ(sch.prefix_hit_tokens(), 8);
}

}  // namespace
}  // namespace syslm::infer
