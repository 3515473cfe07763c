#include "core/thread_pool.hpp"

#include <algorithm>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SYSLM_PAUSE() _mm_pause()
#else
#define SYSLM_PAUSE() std::this_thread::yield()
#endif

namespace syslm {
namespace {

// Spin iterations before sleeping; a pause is ~10-40 ns, so this is tens of microseconds.
constexpr int kSpinIterations = 2000;
constexpr int kYieldEvery = 64;

void chunk(int64_t n, int parts, int i, int64_t* begin, int64_t* end) {
    const int64_t base = n / parts, extra = n % parts;
    *begin = i * base + std::min<int64_t>(i, extra);
    *end = *begin + base + (i < extra ? 1 : 0);
}

}  // namespace

int ThreadPool::resolve(int n_threads) {
    return n_threads > 0 ? n_threads
                         : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int n_threads) {
    n_threads_ = resolve(n_threads);
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mu_);
        stop_.store(true);
    }
    wake_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunk(int index) {
    int64_t b, e;
    chunk(job_n_, n_threads_, index, &b, &e);
    if (b >= e) return;
    try {
        (*job_)(b, e, index);
    } catch (...) {
        std::lock_guard lock(mu_);
        if (!error_) error_ = std::current_exception();
    }
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == seen && !stop_.load()) {
            if (++spins < kSpinIterations) {
                // Yield now and then: if another process holds the other core, the thread we
                // wait for may need this one.
                if (spins % kYieldEvery == 0) std::this_thread::yield();
                else SYSLM_PAUSE();
                continue;
            }
            // Sleep. sleepers_ is raised before the final check, under the lock, so the caller
            // either sees us sleeping (and notifies under the lock) or we see its new generation.
            std::unique_lock lock(mu_);
            sleepers_.fetch_add(1);
            wake_cv_.wait(lock, [&] {
                return generation_.load(std::memory_order_acquire) != seen || stop_.load();
            });
            sleepers_.fetch_sub(1);
        }
        if (stop_.load()) return;
        seen = generation_.load(std::memory_order_acquire);
        run_chunk(index);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
        fn(0, n, 0);
        return;
    }
    job_ = &fn;
    job_n_ = n;
    error_ = nullptr;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    if (sleepers_.load() > 0) {
        std::lock_guard lock(mu_);
        wake_cv_.notify_all();
    }
    run_chunk(0);
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
        if (spins < kSpinIterations && spins % kYieldEvery != 0)
            SYSLM_PAUSE();
        else
            std::this_thread::yield();
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace syslm
