// A deadline on blocking calls: arm() before the call, disarm() after; if the deadline passes
// first, a background thread calls on_timeout (which is expected not to return: it ends the
// job). One call at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace syslm::parallel {

class Watchdog {
public:
    using OnTimeout = std::function<void(const std::string& what, double waited_s)>;
    explicit Watchdog(OnTimeout on_timeout);
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

    void arm(double seconds, std::string what);
    void disarm();

private:
    void run();
    OnTimeout on_timeout_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool armed_ = false, stop_ = false;
    std::chrono::steady_clock::time_point start_, deadline_;
    std::string what_;
    std::thread thread_;
};

}  // namespace syslm::parallel
