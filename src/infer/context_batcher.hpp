// Calls of many threads on their own contexts of one model, run together: a thread asks for its
// context's next rows (model::ContextBatch::Item: token ids or residual rows, up to the head or a
// layer). When no pass is running, the caller runs one itself, taking every call waiting then, up
// to `max_rows` rows (the weights read once for all); calls that arrive during a pass wait for
// it, and one of them runs the next with all of them (flat combining: no hand-off to another
// thread when the calls do not overlap). Below the GEMM's batch
// size, under ExactSmallBatches, each row is computed as its context would alone, bit for bit.
// Larger calls (a prompt's chunk) run alone on the caller's thread. A cloud's sessions
// (serve/cloud_sessions) and an edge's requests (serve/edge_generator) share passes this way.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <vector>

#include "model/context_batch.hpp"

namespace syslm::infer {

struct BatcherStats {
    int64_t passes = 0, calls = 0;  // the batcher's passes and the calls they ran
};

class ContextBatcher {
public:
    // max_rows below kernels::kGemmMinTokens keeps every row exact (the default).
    ContextBatcher(const model::Model& model, int threads, int max_rows = 31);
    ContextBatcher(const ContextBatcher&) = delete;
    ContextBatcher& operator=(const ContextBatcher&) = delete;

    // The item's rows through its context (which no other thread uses meanwhile): every row's
    // or the last row's logits, or (end_layer >= 0) every row's residual stream. Throws what the
    // forward pass threw.
    std::vector<float> run(const model::ContextBatch::Item& item);
    BatcherStats stats() const;

private:
    struct Work {
        model::ContextBatch::Item item;
        std::vector<float> out;
        std::exception_ptr error;
        bool done = false;
    };
    std::vector<float> run_alone(const model::ContextBatch::Item& item);
    void run_pass(std::unique_lock<std::mutex>& lk);  // under mu_, released while it runs

    const model::Model& model_;
    const int max_rows_;
    model::ContextBatch batch_;
    mutable std::mutex mu_;
    std::condition_variable done_cv_;
    std::deque<Work*> queue_;
    bool running_ = false;  // a caller is running a pass
    // The running pass's calls and items (kept for their capacity; the running caller's alone).
    std::vector<Work*> take_;
    std::vector<model::ContextBatch::Item> items_;
    BatcherStats stats_;
};

}  // namespace syslm::infer
