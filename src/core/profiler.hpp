// A low-overhead op profiler. Code marks an op with
//
//     SYSLM_PROFILE_SCOPE("ffn_down", flops, bytes);   // until the end of the enclosing block
//
// or, for a block that is a sequence of ops, one line before each op:
//
//     SYSLM_PROFILE_STEPS(prof);                           // once, at the top of the block
//     SYSLM_PROFILE_STEP(prof, "rms_norm", flops, bytes);  // ends the previous step, if any
//     SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_up", w, T);     // the last step ends with the block
//
// When profiling is off (the default) a scope or step costs a load and a predictable branch: the
// flop/byte expressions are not even evaluated. When on, each thread accumulates calls, time,
// flops and bytes per op name in its own log (no lock on the hot path; a thread takes a lock once,
// the first time it records), and optionally one Chrome trace event per scope.
//
// collect(), reset() and write_chrome_trace() read every thread's log: call them only while no
// profiled code runs (e.g. between forward passes), never concurrently with scopes.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace syslm::profiler {

namespace detail {
extern std::atomic<bool> g_enabled;
extern std::atomic<bool> g_trace;
}  // namespace detail

inline bool enabled() {
    return detail::g_enabled.load(std::memory_order_relaxed);
}
void set_enabled(bool on);
// Trace events are recorded only while both profiling and tracing are on.
void set_trace(bool on);
bool tracing();

// The work an op does: arithmetic operations (a multiply-add counts 2) and bytes it must move.
struct Cost {
    double flops = 0;
    double bytes = 0;
};

// y[T, n_out] = x[T, n_in] * W^T with W stored in `type`: the weights are read once, the float
// activations read and written once.
Cost matmul_cost(DType type, int64_t n_in, int64_t n_out, int64_t n_tokens);

// Nanoseconds on a monotonic clock.
int64_t now_ns();

class Scope {
public:
    Scope() = default;  // inactive
    Scope(const char* name, Cost cost);
    ~Scope() {
        if (name_) finish();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    void finish();
    const char* name_ = nullptr;  // null: profiling was off when the scope began
    Cost cost_;
    int64_t start_ns_ = 0;
};

// Consecutive ops of one block: each step ends where the next begins, the last at the end of the
// block (or at end()).
class Steps {
public:
    Steps() = default;
    ~Steps() {
        if (name_) end();
    }
    Steps(const Steps&) = delete;
    Steps& operator=(const Steps&) = delete;

    void next(const char* name, Cost cost);
    void end();
    bool active() const { return name_ != nullptr; }

private:
    const char* name_ = nullptr;
    Cost cost_;
    int64_t start_ns_ = 0;
};

// Totals of one op over all threads.
struct OpStats {
    std::string name;
    uint64_t calls = 0;
    double seconds = 0;
    double flops = 0;
    double bytes = 0;
};

// Ops in order of first appearance; names recorded by several threads are merged.
std::vector<OpStats> collect();
// Forgets all statistics and trace events (profiling and tracing stay as they are).
void reset();
size_t trace_event_count();
// Writes the recorded trace events as Chrome trace-event JSON (loads in Perfetto and
// chrome://tracing): {"traceEvents": [{"name", "ph": "X", "ts", "dur", "pid", "tid", "args"}]},
// times in microseconds. Throws Error if the file cannot be written.
void write_chrome_trace(const std::string& path);

}  // namespace syslm::profiler

#define SYSLM_PROFILE_CAT2(a, b) a##b
#define SYSLM_PROFILE_CAT(a, b) SYSLM_PROFILE_CAT2(a, b)

// Profiles the rest of the enclosing block as op `name` (a string literal) doing `flops`
// operations on `bytes` bytes.
#define SYSLM_PROFILE_SCOPE(name, flops, bytes)                                                   \
    ::syslm::profiler::Scope SYSLM_PROFILE_CAT(syslm_profile_scope_, __LINE__) {                  \
        ::syslm::profiler::enabled()                                                              \
            ? ::syslm::profiler::Scope(name, ::syslm::profiler::Cost{static_cast<double>(flops),  \
                                                                     static_cast<double>(bytes)}) \
            : ::syslm::profiler::Scope()                                                          \
    }

// Profiles the rest of the enclosing block as a matmul with weight `w` (anything with .type,
// .n_in and .n_out, e.g. kernels::WeightView) over `n_tokens` tokens.
#define SYSLM_PROFILE_MATMUL(name, w, n_tokens)                                                  \
    ::syslm::profiler::Scope SYSLM_PROFILE_CAT(syslm_profile_scope_, __LINE__) {                 \
        ::syslm::profiler::enabled()                                                             \
            ? ::syslm::profiler::Scope(                                                          \
                  name, ::syslm::profiler::matmul_cost((w).type, (w).n_in, (w).n_out, n_tokens)) \
            : ::syslm::profiler::Scope()                                                         \
    }

// A sequence of profiled steps in the enclosing block, named `var`.
#define SYSLM_PROFILE_STEPS(var) ::syslm::profiler::Steps var

// Ends the previous step of `var` and starts op `name`.
#define SYSLM_PROFILE_STEP(var, name, flops, bytes)                                \
    do {                                                                           \
        if (::syslm::profiler::enabled())                                          \
            (var).next(name, ::syslm::profiler::Cost{static_cast<double>(flops),   \
                                                     static_cast<double>(bytes)}); \
        else if ((var).active())                                                   \
            (var).end();                                                           \
    } while (0)

// Same for a matmul with weight `w` (see SYSLM_PROFILE_MATMUL).
#define SYSLM_PROFILE_MATMUL_STEP(var, name, w, n_tokens)                                        \
    do {                                                                                         \
        if (::syslm::profiler::enabled())                                                        \
            (var).next(name,                                                                     \
                       ::syslm::profiler::matmul_cost((w).type, (w).n_in, (w).n_out, n_tokens)); \
        else if ((var).active())                                                                 \
            (var).end();                                                                         \
    } while (0)
