#include "infer/context_batcher.hpp"

#include "core/error.hpp"
#include "kernels/cpu/matmul.hpp"

namespace syslm::infer {

ContextBatcher::ContextBatcher(const model::Model& model, int threads, int max_rows)
    : model_(model), max_rows_(max_rows), batch_(model, max_rows, threads) {}

// A large call on the caller's thread, through the context's own forward.
std::vector<float> ContextBatcher::run_alone(const model::ContextBatch::Item& it) {
    const kernels::ExactSmallBatches exact;  // as plain decoding, where it is small enough
    model::Context& ctx = *it.ctx;
    std::span<const float> out;
    if (it.end_layer >= 0) {
        SYSLM_CHECK(!it.tokens.empty() && it.first_layer == 0,
                    "batcher: residual rows up to a layer start from token ids");
        out = ctx.residual_until(it.end_layer, it.tokens);
        return {out.begin(), out.end()};
    }
    const size_t V = static_cast<size_t>(model_.hparams().n_vocab);
    out = it.tokens.empty() ? ctx.forward_from(it.first_layer, it.residual)
                            : ctx.forward(it.tokens, it.all_logits);
    if (!it.all_logits && out.size() > V) out = out.last(V);
    return {out.begin(), out.end()};
}

std::vector<float> ContextBatcher::run(const model::ContextBatch::Item& item) {
    batch_.check(item);  // a bad call fails alone, not the pass it would have joined
    if (batch_.rows(item) > max_rows_) return run_alone(item);
    Work w;
    w.item = item;
    std::unique_lock lk(mu_);
    queue_.push_back(&w);
    while (!w.done) {
        if (!running_)
            run_pass(lk);  // this caller runs the waiting calls, its own among them
        else
            done_cv_.wait(lk);
    }
    if (w.error) std::rethrow_exception(w.error);
    return std::move(w.out);
}

BatcherStats ContextBatcher::stats() const {
    std::lock_guard lk(mu_);
    return stats_;
}

void ContextBatcher::run_pass(std::unique_lock<std::mutex>& lk) {
    std::vector<Work*>& take = take_;  // only the caller running the pass uses these
    std::vector<model::ContextBatch::Item>& items = items_;
    take.clear();
    int64_t rows = 0;
    while (!queue_.empty()) {
        const int64_t n = batch_.rows(queue_.front()->item);
        if (!take.empty() && rows + n > max_rows_) break;
        rows += n;
        take.push_back(queue_.front());
        queue_.pop_front();
    }
    running_ = true;
    lk.unlock();
    items.clear();
    for (Work* w : take) items.push_back(w->item);
    std::exception_ptr error;
    try {
        const kernels::ExactSmallBatches exact;
        batch_.run(items);
    } catch (...) {
        error = std::current_exception();
    }
    lk.lock();
    for (size_t i = 0; i < take.size(); ++i) {
        if (error)
            take[i]->error = error;
        else
            take[i]->out.assign(items[i].logits.begin(), items[i].logits.end());
        take[i]->done = true;
    }
    ++stats_.passes;
    stats_.calls += static_cast<int64_t>(take.size());
    running_ = false;
    done_cv_.notify_all();  // the finished callers, and one of the others to run the next pass
}

}  // namespace syslm::infer
