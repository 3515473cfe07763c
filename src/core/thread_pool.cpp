#include "core/thread_pool.hpp"

#include <algorithm>
#include <exception>

namespace syslm {
namespace {

void chunk(int64_t n, int parts, int i, int64_t* begin, int64_t* end) {
    const int64_t base = n / parts, extra = n % parts;
    *begin = i * base + std::min<int64_t>(i, extra);
    *end = *begin + base + (i < extra ? 1 : 0);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0)
        n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    n_threads_ = n_threads;
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int64_t, int64_t, int)>* job;
        int64_t n;
        {
            std::unique_lock lock(mu_);
            start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            job = job_;
            n = job_n_;
        }
        int64_t b, e;
        chunk(n, n_threads_, index, &b, &e);
        std::exception_ptr err;
        if (b < e) {
            try {
                (*job)(b, e, index);
            } catch (...) {
                err = std::current_exception();
            }
        }
        std::lock_guard lock(mu_);
        if (err && !error_) error_ = err;
        if (--pending_ == 0) done_cv_.notify_one();
    }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
        fn(0, n, 0);
        return;
    }
    {
        std::lock_guard lock(mu_);
        job_ = &fn;
        job_n_ = n;
        pending_ = n_threads_ - 1;
        error_ = nullptr;
        ++generation_;
    }
    start_cv_.notify_all();
    int64_t b, e;
    chunk(n, n_threads_, 0, &b, &e);
    std::exception_ptr err;
    try {
        if (b < e) fn(b, e, 0);
    } catch (...) {
        err = std::current_exception();
    }
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    if (!err) err = error_;
    if (err) std::rethrow_exception(err);
}

}  // namespace syslm
