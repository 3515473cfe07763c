#include "dist/data_parallel.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"

namespace syslm::dist {

GradientReducer::Bucket GradientReducer::shard_of(const Bucket& b, int rank, int ranks) {
    const size_t n = b.end - b.begin, r = static_cast<size_t>(rank), p = static_cast<size_t>(ranks);
    return {b.begin + n * r / p, b.begin + n * (r + 1) / p};
}

GradientReducer::GradientReducer(Communicator& comm, std::vector<Bucket> buckets, Mode mode)
    : comm_(comm), buckets_(std::move(buckets)), mode_(mode), seen_(buckets_.size(), 0) {
    size_t largest = 0;
    for (const Bucket& b : buckets_) {
        SYSLM_CHECK(b.begin <= b.end, "gradient bucket [", b.begin, ", ", b.end, ") is inverted");
        largest = std::max(largest, b.end - b.begin);
    }
    if (mode_ == Mode::ReduceScatter)
        block_.resize(largest / static_cast<size_t>(comm_.size()) + 1);
    thread_ = std::thread([this] { run(); });
}

GradientReducer::~GradientReducer() {
    {
        std::lock_guard<std::mutex> l(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void GradientReducer::start(float* grads) {
    std::lock_guard<std::mutex> l(mu_);
    SYSLM_CHECK(pending_ == 0, "gradient reduction: a step started before the last finished");
    grads_ = grads;
    pending_ = buckets_.size();
    finishing_ = false;
    std::fill(seen_.begin(), seen_.end(), 0);
}

void GradientReducer::ready(size_t bucket) {
    {
        std::lock_guard<std::mutex> l(mu_);
        SYSLM_CHECK(bucket < buckets_.size() && !seen_[bucket], "gradient reduction: bucket ",
                    bucket, " made ready twice or out of range");
        seen_[bucket] = 1;
        queue_.push_back(bucket);
    }
    cv_.notify_all();
}

void GradientReducer::finish() {
    std::unique_lock<std::mutex> l(mu_);
    for (size_t b = 0; b < seen_.size(); ++b)
        SYSLM_CHECK(seen_[b], "gradient reduction: bucket ", b, " was never made ready");
    finishing_ = true;
    cv_.wait(l, [&] { return pending_ == 0 || error_; });
    if (error_) {
        std::exception_ptr e = error_;
        error_ = nullptr;
        pending_ = 0;
        queue_.clear();
        std::rethrow_exception(e);
    }
}

void GradientReducer::run() {
    for (;;) {
        size_t b;
        {
            std::unique_lock<std::mutex> l(mu_);
            cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
            if (stop_) return;
            b = queue_.front();
            queue_.pop_front();
        }
        const auto t0 = std::chrono::steady_clock::now();
        std::exception_ptr err;
        try {
            const Bucket& k = buckets_[b];
            if (mode_ == Mode::AllReduce) {
                comm_.all_reduce_sum(grads_ + k.begin, k.end - k.begin);
            } else {
                std::vector<size_t> counts;
                for (int r = 0; r < comm_.size(); ++r) {
                    const Bucket s = shard_of(k, r, comm_.size());
                    counts.push_back(s.end - s.begin);
                }
                const Bucket mine = shard_of(k, comm_.rank(), comm_.size());
                comm_.reduce_scatter_sum(grads_ + k.begin, block_.data(), counts);
                std::copy_n(block_.data(), mine.end - mine.begin, grads_ + mine.begin);
            }
        } catch (...) {
            err = std::current_exception();
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        {
            std::lock_guard<std::mutex> l(mu_);
            comm_s_ += s;
            if (!finishing_) hidden_s_ += s;  // the backward was still running when it ended
            if (err && !error_) error_ = err;
            --pending_;
        }
        cv_.notify_all();
    }
}

}  // namespace syslm::dist
