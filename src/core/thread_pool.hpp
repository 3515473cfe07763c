// A persistent pool of worker threads for data-parallel loops. The calling thread takes part in
// every loop, so a pool of n threads starts n-1 workers. Loops are split into contiguous chunks,
// one per thread, so each thread touches its own rows (no false sharing of outputs).
//
// Decode issues hundreds of short loops per token, so hand-off must be cheap: workers spin on an
// atomic generation counter for a short while (~50 us) before sleeping on a condition variable,
// and the caller spins for the stragglers. A woken-from-sleep hand-off costs tens of
// microseconds; a spinning one well under one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace syslm {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);  // n_threads <= 0: number of hardware threads
    static int resolve(int n_threads);   // the count such a pool has
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(begin, end, thread_index) over a partition of [0, n) and waits for all chunks.
    // Exceptions thrown by fn are rethrown in the caller (the first one).
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

private:
    void worker(int index);
    void run_chunk(int index);

    int n_threads_;
    std::vector<std::thread> workers_;
    // Job of the current generation (written before generation_ is bumped, read after).
    const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
    int64_t job_n_ = 0;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};  // workers still running the current job
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
    std::mutex mu_;  // guards sleeping and error_
    std::condition_variable wake_cv_;
    std::exception_ptr error_;
};

}  // namespace syslm
