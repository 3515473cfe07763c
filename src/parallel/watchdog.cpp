#include "parallel/watchdog.hpp"

namespace syslm::parallel {

Watchdog::Watchdog(OnTimeout on_timeout) : on_timeout_(std::move(on_timeout)) {
    thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
    {
        std::lock_guard<std::mutex> l(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void Watchdog::arm(double seconds, std::string what) {
    {
        std::lock_guard<std::mutex> l(mu_);
        armed_ = true;
        start_ = std::chrono::steady_clock::now();
        deadline_ = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(seconds));
        what_ = std::move(what);
    }
    cv_.notify_all();
}

void Watchdog::disarm() {
    std::lock_guard<std::mutex> l(mu_);
    armed_ = false;
}

void Watchdog::run() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
        if (stop_) return;
        if (!armed_) {
            cv_.wait(l);
            continue;
        }
        const auto deadline = deadline_;
        if (cv_.wait_until(l, deadline) == std::cv_status::timeout && armed_ && !stop_ &&
            deadline_ == deadline) {
            const double waited =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
            const std::string what = what_;
            l.unlock();
            on_timeout_(what, waited);  // ends the job
            l.lock();
            armed_ = false;
        }
    }
}

}  // namespace syslm::parallel
