#include "dist/data_parallel.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"

namespace syslm::dist {

GradientReducer::Bucket GradientReducer::shard_of(const Bucket& b, int rank, int ranks) {
    const size_t n = b.end - b.begin, r = static_cast<size_t>(rank), p = static_cast<size_t>(ranks);
    return {b.begin + n * r / p, b.begin + n * (r + 1) / p};
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
    if (mode_ == Mode::ReduceScatter) block_.resize(block);
    if (mode_ == Mode::Compressed) {  // message buffers sized once
        sent_error_.assign(arena, 0.0f);
        sum_error_.assign(arena, 0.0f);
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
    std::vector<Bucket> blocks;
    std::vector<size_t> send, recv, gather;
    for (int r = 0; r < p; ++r) {
        blocks.push_back(shard_of(k, r, p));
        const size_t n = blocks.back().end - blocks.back().begin;
        send.push_back(r == me ? 0 : compressor_.bytes(n));
        gather.push_back(compressor_.bytes(n));
    }
    const Bucket mine = blocks[static_cast<size_t>(me)];
    const size_t own = mine.end - mine.begin;
    for (int r = 0; r < p; ++r) recv.push_back(r == me ? 0 : compressor_.bytes(own));

    // x + e -> message; e <- (x + e) - decoded(message)
    auto encode = [&](const float* x, float* error, size_t n, uint8_t* out) {
        for (size_t i = 0; i < n; ++i) scratch_[i] = x[i] + error[i];
        compressor_.compress(scratch_.data(), n, out);
        std::fill_n(decoded_.begin(), n, 0.0f);
        compressor_.decompress_add(out, n, decoded_.data());
        for (size_t i = 0; i < n; ++i) error[i] = scratch_[i] - decoded_[i];
    };
    // Phase 1: this rank's share of every other block, compressed, to its owner.
    size_t at = 0;
    for (int r = 0; r < p; ++r) {
        const Bucket& b = blocks[static_cast<size_t>(r)];
        if (r != me)
            encode(grads_ + b.begin, sent_error_.data() + b.begin, b.end - b.begin, out_.data() + at);
        at += send[static_cast<size_t>(r)];
    }
    comm_.all_to_all(out_.data(), send, in_.data(), recv);
    float* sum = grads_ + mine.begin;  // own share exact, the others' decoded
    at = 0;
    for (int r = 0; r < p; ++r) {
        if (r != me) compressor_.decompress_add(in_.data() + at, own, sum);
        at += recv[static_cast<size_t>(r)];
    }
    // Phase 2: the block's sum, compressed, to every rank; every rank decodes every block.
    size_t mine_at = 0;
    for (int r = 0; r < me; ++r) mine_at += gather[static_cast<size_t>(r)];
    encode(sum, sum_error_.data() + mine.begin, own, gathered_.data() + mine_at);
    comm_.all_gather_bytes_in_place(gathered_.data(), gather);
    at = 0;
    for (int r = 0; r < p; ++r) {
        const Bucket& b = blocks[static_cast<size_t>(r)];
        std::fill(grads_ + b.begin, grads_ + b.end, 0.0f);
        compressor_.decompress_add(gathered_.data() + at, b.end - b.begin, grads_ + b.begin);
        at += gather[static_cast<size_t>(r)];
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
            if (mode_ == Mode::AllReduce || (mode_ == Mode::Compressed && !compress_)) {
                comm_.all_reduce_sum(grads_ + k.begin, k.end - k.begin);
            } else if (mode_ == Mode::Compressed) {
                reduce_compressed(k);
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
