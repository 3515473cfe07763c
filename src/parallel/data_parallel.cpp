#include "parallel/data_parallel.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"

namespace syslm::parallel {

GradientReducer::Bucket GradientReducer::shard_of(const Bucket& b, int rank, int ranks) {
    const size_t n = b.end - b.begin, r = static_cast<size_t>(rank), p = static_cast<size_t>(ranks);
    return {b.begin + n * r / p, b.begin + n * (r + 1) / p};
}

std::vector<size_t> GradientReducer::shard_counts(const Bucket& b, int ranks) {
    std::vector<size_t> counts;
    for (int r = 0; r < ranks; ++r) {
        const Bucket s = shard_of(b, r, ranks);
        counts.push_back(s.end - s.begin);
    }
    return counts;
}

GradientReducer::GradientReducer(Communicator& comm, std::vector<Bucket> buckets, Mode mode,
                                 Compressor compressor)
    : comm_(comm),
      buckets_(std::move(buckets)),
      mode_(mode),
      compressor_(compressor),
      seen_(buckets_.size(), 0) {
    size_t largest = 0, arena = 0;
    for (const Bucket& b : buckets_) {
        SYSLM_CHECK(b.begin <= b.end, "gradient bucket [", b.begin, ", ", b.end, ") is inverted");
        largest = std::max(largest, b.end - b.begin);
        arena = std::max(arena, b.end);
    }
    const size_t p = static_cast<size_t>(comm_.size()), block = largest / p + 1;
    block_.resize(mode_ == Mode::AllReduce ? 0 : block);
    if (mode_ == Mode::Compressed) {  // message buffers sized once
        sent_error_.assign(arena, 0.0f);
        scratch_.resize(block);
        decoded_.resize(block);
        out_.resize(p * compressor_.bytes(block));
        in_.resize(p * compressor_.bytes(block));
        gathered_.resize(p * compressor_.bytes(block));
    }
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

void GradientReducer::start(float* grads, bool compress) {
    std::lock_guard<std::mutex> l(mu_);
    compress_ = compress;
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

void GradientReducer::reduce_compressed(const Bucket& k) {
    const int p = comm_.size(), me = comm_.rank();
    std::vector<size_t> send, recv;
    const Bucket mine = shard_of(k, me, p);
    const size_t own = mine.end - mine.begin;
    for (int r = 0; r < p; ++r) {
        const Bucket b = shard_of(k, r, p);
        send.push_back(r == me ? 0 : compressor_.bytes(b.end - b.begin));
        recv.push_back(r == me ? 0 : compressor_.bytes(own));
    }
    // This rank's share of every other block, plus what earlier messages lost, compressed to
    // the block's owner; what this message loses is kept for the next step.
    size_t at = 0;
    for (int r = 0; r < p; ++r) {
        const Bucket b = shard_of(k, r, p);
        if (r != me && divisor_.empty()) {
            compressor_.compress_with_feedback(grads_ + b.begin, sent_error_.data() + b.begin,
                                               b.end - b.begin, out_.data() + at, scratch_.data());
        } else if (r != me) {  // C((g + e) / d); e = (g + e) - d * decoded
            const size_t n = b.end - b.begin;
            const float* g = grads_ + b.begin;
            const float* d = divisor_.data() + b.begin;
            float* error = sent_error_.data() + b.begin;
            for (size_t i = 0; i < n; ++i) scratch_[i] = (g[i] + error[i]) / d[i];
            compressor_.compress(scratch_.data(), n, out_.data() + at);
            std::fill_n(decoded_.begin(), n, 0.0f);
            compressor_.decompress_add(out_.data() + at, n, decoded_.data());
            for (size_t i = 0; i < n; ++i) error[i] = g[i] + error[i] - d[i] * decoded_[i];
        }
        at += send[static_cast<size_t>(r)];
    }
    comm_.all_to_all(out_.data(), send, in_.data(), recv);
    at = 0;  // the block's sum: this rank's own share exact, the others' decoded
    for (int r = 0; r < p; ++r) {
        if (r != me && divisor_.empty()) {
            compressor_.decompress_add(in_.data() + at, own, grads_ + mine.begin);
        } else if (r != me) {
            std::fill_n(decoded_.begin(), own, 0.0f);
            compressor_.decompress_add(in_.data() + at, own, decoded_.data());
            const float* d = divisor_.data() + mine.begin;
            for (size_t i = 0; i < own; ++i) grads_[mine.begin + i] += d[i] * decoded_[i];
        }
        at += recv[static_cast<size_t>(r)];
    }
}

void GradientReducer::reduce_scatter(const Bucket& k) {
    const Bucket mine = shard_of(k, comm_.rank(), comm_.size());
    comm_.reduce_scatter_sum(grads_ + k.begin, block_.data(), shard_counts(k, comm_.size()));
    std::copy_n(block_.data(), mine.end - mine.begin, grads_ + mine.begin);
}

void GradientReducer::all_gather_updates(float* values, const float* master) {
    SYSLM_CHECK(mode_ == Mode::Compressed, "gradient reduction: compressed updates need the "
                                           "compressed mode");
    const int p = comm_.size(), me = comm_.rank();
    for (const Bucket& k : buckets_) {
        std::vector<size_t> gather;
        size_t mine_at = 0;
        for (int r = 0; r < p; ++r) {
            const Bucket b = shard_of(k, r, p);
            gather.push_back(compressor_.bytes(b.end - b.begin));
            if (r < me) mine_at += gather.back();
        }
        const Bucket mine = shard_of(k, me, p);
        const size_t own = mine.end - mine.begin;
        // The owner's difference between its exact weights and the shared ones: this step's
        // update plus what earlier messages lost.
        for (size_t i = 0; i < own; ++i) scratch_[i] = master[i] - values[mine.begin + i];
        master += own;
        compressor_.compress(scratch_.data(), own, gathered_.data() + mine_at);
        comm_.all_gather_bytes_in_place(gathered_.data(), gather);
        size_t at = 0;
        for (int r = 0; r < p; ++r) {
            const Bucket b = shard_of(k, r, p);
            compressor_.decompress_add(gathered_.data() + at, b.end - b.begin, values + b.begin);
            at += gather[static_cast<size_t>(r)];
        }
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
            if (mode_ == Mode::AllReduce)
                comm_.all_reduce_sum(grads_ + k.begin, k.end - k.begin);
            else if (mode_ == Mode::Compressed && compress_)
                reduce_compressed(k);
            else
                reduce_scatter(k);
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

}  // namespace syslm::parallel
