// Continuous batching: which sequences run in the next step, and how many of their tokens. A
// step has a token budget; running sequences come first, oldest first (a decode token each, or
// the next chunk of a prompt), then waiting ones are admitted first come first served with
// chunks of their prompts while budget, pages and running slots last. A request's priority
// (lower first, as vLLM's) orders both, and a waiting request more urgent than a running one
// preempts it for its slot or pages and goes first. When pages run out, the
// newest running sequence is preempted: its pages go back to the pool and it returns to the
// head of the waiting queue, to be recomputed (prompt and generated tokens) later — no request
// fails for lack of KV memory unless it cannot fit alone. The waiting queue is bounded.
//
// Pure policy over KvPages: no model, no threads (the engine calls it between steps).
#pragma once

#include <bit>
#include <cstdint>
#include <deque>
#include <vector>

#include "infer/kv_pages.hpp"
#include "kernels/cpu/linear_attention.hpp"

namespace syslm::infer {

struct Sequence {
    int64_t id = 0;
    int64_t arrival = 0;          // order of submission (FCFS; set by submit)
    int priority = 0;             // lower first (vLLM's convention), then by arrival
    std::vector<int32_t> tokens;  // prompt, then the generated tokens
    int64_t n_prompt = 0;
    int64_t computed = 0;  // positions whose K/V are in `table`
    BlockTable table;
    bool too_long = false;   // cannot fit in the whole pool: the engine ends it with an error
    int window = 0;          // the local layers' window for this sequence (0: the model's)
    float expert_top_p = 0;  // a top-p MoE model's p for this sequence (0: the model's)
    uint32_t lora_variant = 0;  // its LoRA adapters' set, numbered by the engine (0: none)
    // What its K/V depend on besides the tokens and window: its cached pages serve only
    // sequences with the same. A positive top-p's bits are a normal float's (>= 2^23), so
    // without one the adapter set's number (< 2^23) alone cannot collide with it.
    uint32_t variant() const {
        const uint32_t p = std::bit_cast<uint32_t>(expert_top_p);
        return p == 0 ? lora_variant : p ^ (lora_variant * 2654435761u);
    }
    // Linear-attention layers' recurrent states (one per layer; empty until the engine sizes
    // it), reset whenever the sequence's K/V are given back.
    std::vector<kernels::LinearState> linear;
    int64_t preemptions = 0;
};

struct SchedulerConfig {
    int64_t token_budget = 512;  // tokens per step (decode + prefill chunks)
    int max_running = 16;        // sequences per step (--parallel)
    int max_waiting = 256;       // queued requests beyond that are refused
};

struct ScheduledWork {
    Sequence* seq;
    int64_t n;  // tokens[seq->computed .. seq->computed + n) run this step
};

class Scheduler {
public:
    Scheduler(const SchedulerConfig& cfg, KvPages& pages) : cfg_(cfg), pages_(pages) {}

    // Queues a new sequence; false when the waiting queue is full.
    bool submit(Sequence* s);
    // The next step's work; pages for it are reserved (KvPages::append). Sequences that cannot
    // fit even alone are marked too_long and removed (the caller reports them).
    std::vector<ScheduledWork> schedule();
    // After the step ran: the scheduled positions are computed.
    void completed(const std::vector<ScheduledWork>& work);
    // Removes a finished or cancelled sequence (running or waiting) and releases its pages.
    void remove(Sequence* s);

    const std::vector<Sequence*>& running() const { return running_; }
    const std::deque<Sequence*>& waiting() const { return waiting_; }
    std::vector<Sequence*> take_rejected();  // the too_long ones since the last call
    int64_t preemptions() const { return preemptions_; }
    int64_t prefix_hit_tokens() const { return prefix_hits_; }

private:
    void preempt(Sequence* s);
    // Takes the waiting queue's head into the running set with the first chunk of what it has
    // to compute (after a prefix match); false when the pages are lacking (it stays waiting).
    bool admit(Sequence* s, std::vector<ScheduledWork>& out, int64_t& budget);

    SchedulerConfig cfg_;
    KvPages& pages_;
    int64_t next_arrival_ = 0;
    std::vector<Sequence*> running_;  // ascending arrival
    std::deque<Sequence*> waiting_;   // ascending arrival
    std::vector<Sequence*> rejected_;
    int64_t preemptions_ = 0, prefix_hits_ = 0;
};

}  // namespace syslm::infer
