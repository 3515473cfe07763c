#include "core/profiler.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/error.hpp"

namespace syslm::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
std::atomic<bool> g_trace{false};
}  // namespace detail

namespace {

struct OpAccum {
    const char* name;
    uint64_t calls = 0;
    int64_t ns = 0;
    double flops = 0, bytes = 0;
};

struct Event {
    const char* name;
    int64_t start_ns, dur_ns;
    double flops, bytes;
};

// One per thread that ever recorded; owned by the registry so that statistics of finished
// threads survive until collected.
struct ThreadLog {
    int tid = 0;
    std::vector<OpAccum> ops;  // few distinct ops: a linear scan by pointer beats hashing
    size_t last = 0;           // index of the previous op: consecutive calls usually repeat
    std::vector<Event> events;
};

struct Registry {
    std::mutex mu;
    std::vector<std::unique_ptr<ThreadLog>> logs;
    const int64_t epoch_ns = now_ns();  // trace timestamps count from here
};

Registry& registry() {
    static Registry r;
    return r;
}

thread_local ThreadLog* t_log = nullptr;

ThreadLog& this_thread_log() {
    if (!t_log) {
        Registry& r = registry();
        std::lock_guard lock(r.mu);
        r.logs.push_back(std::make_unique<ThreadLog>());
        t_log = r.logs.back().get();
        t_log->tid = static_cast<int>(gettid());
    }
    return *t_log;
}

OpAccum& find_op(ThreadLog& log, const char* name) {
    if (log.last < log.ops.size() && log.ops[log.last].name == name) return log.ops[log.last];
    for (size_t i = 0; i < log.ops.size(); ++i)
        if (log.ops[i].name == name) return log.ops[log.last = i];
    log.ops.push_back(OpAccum{name});
    log.last = log.ops.size() - 1;
    return log.ops.back();
}

void write_json_string(std::FILE* f, const char* s) {
    std::fputc('"', f);
    for (; *s; ++s) {
        const unsigned char c = static_cast<unsigned char>(*s);
        if (c == '"' || c == '\\')
            std::fprintf(f, "\\%c", c);
        else if (c < 0x20)
            std::fprintf(f, "\\u%04x", c);
        else
            std::fputc(c, f);
    }
    std::fputc('"', f);
}

}  // namespace

void set_enabled(bool on) {
    registry();  // fixes the trace epoch before the first scope starts
    detail::g_enabled.store(on, std::memory_order_relaxed);
}
void set_trace(bool on) {
    detail::g_trace.store(on, std::memory_order_relaxed);
}
bool tracing() {
    return detail::g_trace.load(std::memory_order_relaxed);
}

Cost matmul_cost(DType type, int64_t n_in, int64_t n_out, int64_t n_tokens) {
    const double w = static_cast<double>(row_bytes(type, n_in)) * static_cast<double>(n_out);
    const double act = 4.0 * static_cast<double>(n_tokens) * static_cast<double>(n_in + n_out);
    return {2.0 * static_cast<double>(n_in) * static_cast<double>(n_out) *
                static_cast<double>(n_tokens),
            w + act};
}

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

Scope::Scope(const char* name, Cost cost) : name_(name), cost_(cost), start_ns_(now_ns()) {}

namespace {
void record(const char* name, const Cost& cost, int64_t start_ns, int64_t end_ns) {
    const int64_t dur = end_ns - start_ns;
    ThreadLog& log = this_thread_log();
    OpAccum& op = find_op(log, name);
    op.calls += 1;
    op.ns += dur;
    op.flops += cost.flops;
    op.bytes += cost.bytes;
    if (tracing()) log.events.push_back({name, start_ns, dur, cost.flops, cost.bytes});
}
}  // namespace

void Scope::finish() {
    record(name_, cost_, start_ns_, now_ns());
}

void Steps::next(const char* name, Cost cost) {
    const int64_t t = now_ns();
    if (name_) record(name_, cost_, start_ns_, t);
    name_ = name;
    cost_ = cost;
    start_ns_ = t;
}

void Steps::end() {
    if (name_) record(name_, cost_, start_ns_, now_ns());
    name_ = nullptr;
}

std::vector<OpStats> collect() {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    std::vector<OpStats> out;
    for (const auto& log : r.logs) {
        for (const OpAccum& a : log->ops) {
            OpStats* s = nullptr;
            for (OpStats& o : out)
                if (o.name == a.name) s = &o;
            if (!s) {
                out.push_back(OpStats{a.name});
                s = &out.back();
            }
            s->calls += a.calls;
            s->seconds += static_cast<double>(a.ns) * 1e-9;
            s->flops += a.flops;
            s->bytes += a.bytes;
        }
    }
    return out;
}

void reset() {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    for (auto& log : r.logs) {
        log->ops.clear();
        log->last = 0;
        log->events.clear();
    }
}

size_t trace_event_count() {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    size_t n = 0;
    for (const auto& log : r.logs) n += log->events.size();
    return n;
}

void write_chrome_trace(const std::string& path) {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "w"), std::fclose);
    SYSLM_CHECK(f, path, ": cannot open the trace file for writing: ", std::strerror(errno));
    const int pid = static_cast<int>(getpid());
    std::fprintf(f.get(), "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    bool first = true;
    for (const auto& log : r.logs) {
        std::fprintf(f.get(),
                     "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                     "\"args\":{\"name\":\"syslm thread %d\"}}",
                     first ? "" : ",\n", pid, log->tid, log->tid);
        first = false;
        for (const Event& e : log->events) {
            std::fprintf(f.get(), ",\n{\"name\":");
            write_json_string(f.get(), e.name);
            std::fprintf(f.get(),
                         ",\"cat\":\"op\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
                         "\"tid\":%d,\"args\":{\"flops\":%.0f,\"bytes\":%.0f}}",
                         static_cast<double>(e.start_ns - r.epoch_ns) * 1e-3,
                         static_cast<double>(e.dur_ns) * 1e-3, pid, log->tid, e.flops, e.bytes);
        }
    }
    std::fprintf(f.get(), "\n]}\n");
    SYSLM_CHECK(std::fflush(f.get()) == 0 && !std::ferror(f.get()), path,
                ": error while writing the trace file");
}

}  // namespace syslm::profiler
