#include "infer/scheduler.hpp"

#include <algorithm>

namespace syslm::infer {

namespace {

// Who goes first: the more urgent (lower priority value), then the earlier.
bool before(const Sequence* a, const Sequence* b) {
    return a->priority != b->priority ? a->priority < b->priority : a->arrival < b->arrival;
}

int64_t pending(const Sequence* s) {
    return static_cast<int64_t>(s->tokens.size()) - s->computed;
}

}  // namespace

bool Scheduler::submit(Sequence* s) {
    if (static_cast<int>(waiting_.size()) >= cfg_.max_waiting) return false;
    s->arrival = next_arrival_++;
    waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), s, before), s);
    return true;
}

void Scheduler::preempt(Sequence* s) {
    running_.erase(std::find(running_.begin(), running_.end(), s));
    pages_.release(s->table);
    for (auto& l : s->linear) l.reset();
    s->computed = 0;  // recomputed from its tokens (prompt + generated) when readmitted
    ++s->preemptions;
    ++preemptions_;
    waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), s, before), s);
}

bool Scheduler::admit(Sequence* s, std::vector<ScheduledWork>& out, int64_t& budget) {
    const int64_t pool_positions =
        static_cast<int64_t>(pages_.config().n_pages) * pages_.config().page_size;
    if (static_cast<int64_t>(s->tokens.size()) > pool_positions) {
        s->too_long = true;
        waiting_.pop_front();
        rejected_.push_back(s);
        return true;
    }
    const int64_t hit = pages_.match_prefix(s->table, s->tokens, s->window, s->variant());
    s->computed = hit;
    const int64_t n = std::min(pending(s), budget);
    if (!pages_.append(s->table, n)) {
        pages_.release(s->table);  // matched pages go back: waiting holds nothing
        s->computed = 0;
        return false;
    }
    prefix_hits_ += hit;
    waiting_.pop_front();
    running_.insert(std::upper_bound(running_.begin(), running_.end(), s, before), s);
    out.push_back({s, n});
    budget -= n;
    return true;
}

std::vector<ScheduledWork> Scheduler::schedule() {
    std::vector<ScheduledWork> out;
    int64_t budget = cfg_.token_budget;
    const int64_t pool_positions =
        static_cast<int64_t>(pages_.config().n_pages) * pages_.config().page_size;

    // Waiting requests more urgent than the least urgent running one go first: each preempts
    // the least urgent running sequences while it lacks a slot or the pages of its first chunk,
    // and is admitted before the running ones take their tokens.
    while (budget > 0 && !waiting_.empty() && !running_.empty() &&
           waiting_.front()->priority < running_.back()->priority) {
        Sequence* s = waiting_.front();
        while (!running_.empty() && s->priority < running_.back()->priority &&
               (static_cast<int>(running_.size()) >= cfg_.max_running ||
                !pages_.can_append(BlockTable{}, std::min(pending(s), budget))))
            preempt(running_.back());
        if (static_cast<int>(running_.size()) >= cfg_.max_running || !admit(s, out, budget)) break;
    }
    const size_t urgent = out.size();  // admitted above: not scheduled again below

    // Running sequences, most urgent and oldest first: a decode token each, or the next chunk of
    // a prompt. When pages run out, the least urgent newest running sequence not yet scheduled
    // is preempted (possibly this one: then everything before it holds the pages).
    for (size_t i = 0; i < running_.size() && budget > 0;) {
        Sequence* s = running_[i];
        const auto admitted = out.begin() + static_cast<std::ptrdiff_t>(urgent);
        if (pending(s) <= 0 || std::find_if(out.begin(), admitted, [&](const ScheduledWork& w) {
                                   return w.seq == s;
                               }) != admitted) {
            ++i;
            continue;
        }
        const int64_t n = std::min(pending(s), budget);
        bool ok = pages_.append(s->table, n);
        while (!ok && running_.back() != s) {
            preempt(running_.back());  // after s: not scheduled yet
            ok = pages_.append(s->table, n);
        }
        if (ok) {
            out.push_back({s, n});
            budget -= n;
            ++i;
        } else if (out.empty() && static_cast<int64_t>(s->tokens.size()) > pool_positions) {
            s->too_long = true;  // cannot fit even alone
            running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
            pages_.release(s->table);
            rejected_.push_back(s);
        } else {
            preempt(s);  // the ones before it hold the pages: s waits (it is the last: loop ends)
        }
    }

    // Waiting sequences, most urgent and first come first, while budget, slots and pages last.
    while (budget > 0 && !waiting_.empty() && static_cast<int>(running_.size()) < cfg_.max_running)
        if (!admit(waiting_.front(), out, budget)) break;
    return out;
}

void Scheduler::completed(const std::vector<ScheduledWork>& work) {
    for (const ScheduledWork& w : work) w.seq->computed += w.n;
}

void Scheduler::remove(Sequence* s) {
    if (auto it = std::find(running_.begin(), running_.end(), s); it != running_.end())
        running_.erase(it);
    if (auto it = std::find(waiting_.begin(), waiting_.end(), s); it != waiting_.end())
        waiting_.erase(it);
    pages_.release(s->table);
    for (auto& l : s->linear) l.reset();
    s->computed = 0;
}

std::vector<Sequence*> Scheduler::take_rejected() {
    std::vector<Sequence*> r;
    r.swap(rejected_);
    return r;
}

}  // namespace syslm::infer
