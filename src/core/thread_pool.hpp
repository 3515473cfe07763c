// A persistent pool of worker threads for data-parallel loops. The calling thread takes part in
// every loop, so a pool of n threads starts n-1 workers. Loops are split into contiguous chunks,
// one per thread, so each thread touches its own rows (no false sharing of outputs).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace syslm {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);  // n_threads <= 0: number of hardware threads
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(begin, end, thread_index) over a partition of [0, n) and waits for all chunks.
    // Exceptions thrown by fn are rethrown in the caller (the first one).
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

private:
    void worker(int index);

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable start_cv_, done_cv_;
    const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
    int64_t job_n_ = 0;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

}  // namespace syslm
