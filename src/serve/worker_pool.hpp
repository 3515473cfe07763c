// The HTTP handlers' threads. A job is handed to an idle worker or refused at once (the caller
// answers 503): nothing ever queues behind a busy pool. The most recently idle worker is
// chosen, so a light load keeps running on a few warm threads (their stacks and allocator
// caches) however many workers there are.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace syslm::serve {

class WorkerPool {
public:
    explicit WorkerPool(int workers);
    ~WorkerPool();  // stop()
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    // Runs `job` on an idle worker; false (and `job` untouched) when every worker is busy or
    // the pool is stopping.
    bool try_run(std::function<void()>& job);
    int size() const { return static_cast<int>(workers_.size()); }
    int busy() const;
    // Lets running jobs finish, then joins the threads.
    void stop();

private:
    struct Worker {
        std::thread thread;
        std::condition_variable cv;
        std::function<void()> job;
    };
    void run(Worker& w);

    mutable std::mutex mu_;
    std::vector<std::unique_ptr<Worker>> workers_;
    std::vector<Worker*> idle_;  // a stack: the last one to become idle is used first
    bool stopping_ = false;
};

}  // namespace syslm::serve
