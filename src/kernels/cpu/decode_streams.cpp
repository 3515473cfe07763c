#include "kernels/cpu/decode_streams.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "kernels/kernel_choices.hpp"

namespace syslm::kernels {

namespace {

constexpr int64_t kMaxWarmupCalls = 512;
constexpr int64_t kSamplesEach = 96;

struct TrialState {
    std::atomic<int> streams{0};    // the choice, 0 while undecided
    std::atomic<int> phase{0};      // 0: warm-up (weights being paged in), 1: trials
    std::atomic<const void*> first{nullptr};  // first weights seen: back to them = one pass done
    std::atomic<int64_t> warmup_calls{0}, trials{0};
    std::atomic<int64_t> ns[2] = {0, 0}, bytes[2] = {0, 0}, samples[2] = {0, 0};
    std::atomic<bool> looked_up{false};  // the remembered choice was asked for
    std::string remembered;  // its timings, set before `streams` (release) where it was read
};

// One slot per type: the low bits of the GGUF id, and the run-time layouts (ids 0x1xxxx, 0x2xxxx)
// after them.
std::array<TrialState, 192> g_states;

TrialState& state(DType type) {
    const auto v = static_cast<uint32_t>(type);
    const size_t i = (v & 0x3F) + 64 * ((v >> 16) & 0x3);
    return g_states[i];
}

int env_streams() {
    static const int n = [] {
        const char* e = std::getenv("SYSLM_DECODE_STREAMS");
        if (!e || !*e) return 0;
        const std::string s(e);
        if (s != "1" && s != "2") fail("SYSLM_DECODE_STREAMS='", s, "': expected 1 or 2");
        return s == "1" ? 1 : 2;
    }();
    return n;
}

std::string key(DType type) {
    return "decode-streams-" + std::string(dtype_name(type));
}

bool one_or_two(const std::string& v) {
    return v == "1" || v == "2";
}

std::string rates(const TrialState& s) {
    char line[160];
    std::snprintf(line, sizeof line,
                  "one stream per thread %.1f GB/s (%lld calls), two streams %.1f GB/s (%lld calls)",
                  s.ns[0] > 0 ? static_cast<double>(s.bytes[0]) / static_cast<double>(s.ns[0]) : 0.0,
                  static_cast<long long>(s.samples[0].load()),
                  s.ns[1] > 0 ? static_cast<double>(s.bytes[1]) / static_cast<double>(s.ns[1]) : 0.0,
                  static_cast<long long>(s.samples[1].load()));
    return line;
}

// Once per type: a choice another process made on this machine (kernels/kernel_choices.hpp).
void look_up_remembered(DType type, TrialState& s) {
    if (s.looked_up.load(std::memory_order_relaxed) || s.looked_up.exchange(true)) return;
    if (const auto c = stored_kernel_choice(key(type), one_or_two)) {
        s.remembered = c->timings;
        int expected = 0;
        s.streams.compare_exchange_strong(expected, c->value == "1" ? 1 : 2);
    }
}

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

DecodeStreamsChoice decode_streams_choice(DType type) {
    DecodeStreamsChoice c;
    if (const int e = env_streams()) {
        c.streams = e;
        c.from_env = true;
        return c;
    }
    const TrialState& s = state(type);
    c.streams = s.streams.load(std::memory_order_acquire);
    c.remembered = c.streams != 0 && !s.remembered.empty();
    for (int v = 0; v < 2; ++v) {
        c.samples[v] = s.samples[v].load();
        const int64_t ns = s.ns[v].load();
        c.gb_per_s[v] = ns > 0 ? static_cast<double>(s.bytes[v].load()) / static_cast<double>(ns)
                               : 0.0;
    }
    return c;
}

std::string describe_decode_streams() {
    if (const int e = env_streams())
        return "decode weights read as " + std::to_string(e) +
               (e == 1 ? " stream" : " streams") + " per thread (SYSLM_DECODE_STREAMS)\n";
    std::string out;
    for (DType t :
         {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
          DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
          DType::Q4_0_G8, DType::Q8_0_G8W, DType::Q4_K_LANE, DType::Q5_K_LANE, DType::Q6_K_LANE}) {
        const DecodeStreamsChoice c = decode_streams_choice(t);
        const TrialState& s = state(t);
        if (c.streams != 0 && !s.remembered.empty()) {
            out += "decode " + std::string(dtype_name(t)) + " weights: " +
                   (c.streams == 1 ? "one stream" : "two streams") + " (remembered: " +
                   s.remembered + ")\n";
            continue;
        }
        if (c.samples[0] + c.samples[1] == 0) continue;
        char line[256];
        std::snprintf(line, sizeof line,
                      "decode %s weights: %s; one stream per thread %.1f GB/s (%lld calls), two "
                      "streams %.1f GB/s (%lld calls)\n",
                      dtype_name(t).data(),
                      c.streams == 0 ? "still measuring, two streams meanwhile"
                      : c.streams == 1 ? "one stream chosen" : "two streams chosen",
                      c.gb_per_s[0], static_cast<long long>(c.samples[0]), c.gb_per_s[1],
                      static_cast<long long>(c.samples[1]));
        out += line;
    }
    return out;
}

DecodeStreamsCall::DecodeStreamsCall(DType type, const void* weights, size_t weight_bytes)
    : type_(type), bytes_(weight_bytes) {
    if (const int e = env_streams()) {
        streams_ = e;
        return;
    }
    TrialState& s = state(type);
    look_up_remembered(type, s);
    if (const int chosen = s.streams.load(std::memory_order_acquire)) {
        streams_ = chosen;
        return;
    }
    if (weight_bytes < kDecodeStreamsMinBytes) return;  // the default until chosen
    if (s.phase.load(std::memory_order_relaxed) == 0) {
        const void* expected = nullptr;
        if (!s.first.compare_exchange_strong(expected, weights) && expected == weights)
            s.phase.store(1);
        if (++s.warmup_calls >= kMaxWarmupCalls) s.phase.store(1);
        return;
    }
    streams_ = 1 + static_cast<int>(s.trials++ % 2);
    state_ = &s;
    t0_ns_ = now_ns();
}

DecodeStreamsCall::~DecodeStreamsCall() {
    if (!state_) return;
    const int64_t dt = now_ns() - t0_ns_;
    auto& s = *static_cast<TrialState*>(state_);
    const int v = streams_ - 1;
    s.ns[v] += dt;
    s.bytes[v] += static_cast<int64_t>(bytes_);
    ++s.samples[v];
    if (s.samples[0].load() < kSamplesEach || s.samples[1].load() < kSamplesEach) return;
    // bytes per ns of each way over all its calls; ties keep two streams.
    const double r1 = static_cast<double>(s.bytes[0].load()) / static_cast<double>(s.ns[0].load());
    const double r2 = static_cast<double>(s.bytes[1].load()) / static_cast<double>(s.ns[1].load());
    int expected = 0;
    if (!s.streams.compare_exchange_strong(expected, r1 > r2 ? 1 : 2)) return;
    // Remembered for the next processes; where another stored its choice first, that one holds.
    const KernelChoice stored =
        store_kernel_choice(key(type_), {r1 > r2 ? "1" : "2", rates(s), false}, one_or_two);
    if (stored.remembered) s.streams.store(stored.value == "1" ? 1 : 2);
}

}  // namespace syslm::kernels
