#include "serve/worker_pool.hpp"

#include "core/error.hpp"

namespace syslm::serve {

WorkerPool::WorkerPool(int workers) {
    SYSLM_CHECK(workers > 0, "serve: the HTTP worker count must be positive, not ", workers);
    workers_.reserve(static_cast<size_t>(workers));
    for (int i = 0; i < workers; ++i) workers_.push_back(std::make_unique<Worker>());
    for (auto it = workers_.rbegin(); it != workers_.rend(); ++it) idle_.push_back(it->get());
    for (auto& w : workers_) w->thread = std::thread([this, p = w.get()] { run(*p); });
}

WorkerPool::~WorkerPool() {
    stop();
}

bool WorkerPool::try_run(std::function<void()>& job) {
    Worker* w = nullptr;
    {
        std::lock_guard lk(mu_);
        if (stopping_ || idle_.empty()) return false;
        w = idle_.back();
        idle_.pop_back();
        w->job = std::move(job);
    }
    w->cv.notify_one();
    return true;
}

int WorkerPool::busy() const {
    std::lock_guard lk(mu_);
    return static_cast<int>(workers_.size() - idle_.size());
}

void WorkerPool::stop() {
    {
        std::lock_guard lk(mu_);
        if (stopping_ && workers_.empty()) return;
        stopping_ = true;
    }
    for (auto& w : workers_) w->cv.notify_one();
    for (auto& w : workers_)
        if (w->thread.joinable()) w->thread.join();
    std::lock_guard lk(mu_);
    idle_.clear();
    workers_.clear();
}

void WorkerPool::run(Worker& w) {
    std::unique_lock lk(mu_);
    while (true) {
        w.cv.wait(lk, [&] { return w.job || stopping_; });
        if (!w.job) return;  // stopping, nothing to run
        std::function<void()> job = std::move(w.job);
        w.job = nullptr;
        lk.unlock();
        job();          // the transport catches what a handler throws
        job = nullptr;  // release its captures before becoming idle
        lk.lock();
        idle_.push_back(&w);
    }
}

}  // namespace syslm::serve
