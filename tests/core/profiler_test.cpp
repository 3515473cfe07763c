// The profiler: scopes and steps record calls, time, flops and bytes per op across threads;
// nothing is recorded (nor cost expressions evaluated) while it is off; the Chrome trace is
// valid JSON with one complete event per scope.
#include "core/profiler.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/error.hpp"

namespace syslm::profiler {
namespace {

struct ProfilerOn {
    explicit ProfilerOn(bool trace = false) {
        reset();
        set_trace(trace);
        set_enabled(true);
    }
    ~ProfilerOn() {
        set_enabled(false);
        set_trace(false);
    }
};

const OpStats* find(const std::vector<OpStats>& v, const std::string& name) {
    for (const OpStats& s : v)
        if (s.name == name) return &s;
    return nullptr;
}

void busy_for(std::chrono::microseconds d) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
    }
}

TEST(Profiler, OffRecordsNothingAndSkipsCostExpressions) {
    reset();
    set_enabled(false);
    int evaluated = 0;
    auto cost = [&] { return ++evaluated; };
    for (int i = 0; i < 10; ++i) {
        SYSLM_PROFILE_SCOPE("off_scope", cost(), cost());
        SYSLM_PROFILE_STEPS(steps);
        SYSLM_PROFILE_STEP(steps, "off_step", cost(), 1);
    }
    EXPECT_EQ(evaluated, 0);
    EXPECT_TRUE(collect().empty());
}

TEST(Profiler, ScopesSumCallsFlopsBytesAndTime) {
    ProfilerOn on;
    for (int i = 0; i < 7; ++i) {
        SYSLM_PROFILE_SCOPE("op_a", 1000 + i, 3 * i);
        busy_for(std::chrono::microseconds(200));
    }
    { SYSLM_PROFILE_SCOPE("op_b", 5, 6); }
    const auto stats = collect();
    const OpStats* a = find(stats, "op_a");
    const OpStats* b = find(stats, "op_b");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->calls, 7u);
    EXPECT_DOUBLE_EQ(a->flops, 7 * 1000 + 21);
    EXPECT_DOUBLE_EQ(a->bytes, 3 * 21);
    EXPECT_GE(a->seconds, 7 * 200e-6);
    EXPECT_LT(a->seconds, 1.0);
    EXPECT_EQ(b->calls, 1u);
    reset();
    EXPECT_TRUE(collect().empty());
}

TEST(Profiler, StepsEndWhereTheNextBegins) {
    ProfilerOn on;
    {
        SYSLM_PROFILE_STEPS(steps);
        SYSLM_PROFILE_STEP(steps, "first", 1, 2);
        // Far longer than "second": a busy 2-core VM once stretched second's 1 ms to 4.8 ms.
        busy_for(std::chrono::microseconds(20000));
        SYSLM_PROFILE_STEP(steps, "second", 3, 4);
        busy_for(std::chrono::microseconds(1000));
    }  // "second" ends here
    const auto stats = collect();
    const OpStats* f = find(stats, "first");
    const OpStats* s = find(stats, "second");
    ASSERT_TRUE(f && s);
    EXPECT_EQ(f->calls, 1u);
    EXPECT_EQ(s->calls, 1u);
    EXPECT_GE(f->seconds, 3e-3);
    EXPECT_GE(s->seconds, 1e-3);
    EXPECT_LT(s->seconds, f->seconds);  // "first" did not swallow "second", nor the reverse
    EXPECT_DOUBLE_EQ(s->flops, 3);
}

TEST(Profiler, ThreadsRecordWithoutLosingCalls) {
    ProfilerOn on;
    constexpr int kThreads = 4, kCalls = 5000;
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([] {
            for (int i = 0; i < kCalls; ++i) {
                SYSLM_PROFILE_SCOPE("threaded", 2, 1);
            }
        });
    for (auto& t : ts) t.join();
    const OpStats* s = find(collect(), "threaded");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->calls, static_cast<uint64_t>(kThreads * kCalls));
    EXPECT_DOUBLE_EQ(s->flops, 2.0 * kThreads * kCalls);
}

TEST(Profiler, MatmulCostCountsWeightsAndActivations) {
    // Q4_0: 18 bytes per block of 32.
    const Cost c = matmul_cost(DType::Q4_0, 96, 10, 3);
    EXPECT_DOUBLE_EQ(c.flops, 2.0 * 96 * 10 * 3);
    EXPECT_DOUBLE_EQ(c.bytes, 3 * 18 * 10 + 4.0 * 3 * (96 + 10));
}

TEST(Profiler, ChromeTraceIsValidJsonWithOneEventPerScope) {
    ProfilerOn on(/*trace=*/true);
    for (int i = 0; i < 3; ++i) {
        SYSLM_PROFILE_SCOPE("traced \"op\"", 10, 20);
        busy_for(std::chrono::microseconds(50));
    }
    std::thread([] { SYSLM_PROFILE_SCOPE("other_thread", 1, 1); }).join();
    set_trace(false);
    { SYSLM_PROFILE_SCOPE("untraced", 1, 1); }
    EXPECT_EQ(trace_event_count(), 4u);
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    const std::string path = std::string(SYSLM_TEST_TMP) + "/trace.json";
    write_chrome_trace(path);
    std::ifstream in(path);
    const nlohmann::json j = nlohmann::json::parse(in);
    int complete = 0;
    std::set<int> tids;
    double last_ts = -1;
    for (const auto& e : j.at("traceEvents")) {
        if (e.at("ph") != "X") continue;
        ++complete;
        tids.insert(e.at("tid").get<int>());
        EXPECT_GT(e.at("dur").get<double>(), 0);
        EXPECT_TRUE(e.contains("pid"));
        if (e.at("name") == "traced \"op\"") {
            EXPECT_GE(e.at("dur").get<double>(), 50);  // microseconds
            EXPECT_GT(e.at("ts").get<double>(), last_ts);
            last_ts = e.at("ts").get<double>();
            EXPECT_EQ(e.at("args").at("bytes").get<double>(), 20);
        }
    }
    EXPECT_EQ(complete, 4);
    EXPECT_EQ(tids.size(), 2u);
    EXPECT_THROW(write_chrome_trace("/nonexistent-dir/trace.json"), Error);
}

// Off, a scope is a load and a branch: far below the microseconds an op takes.
TEST(Profiler, OffCostsAFewNanosecondsPerScope) {
    set_enabled(false);
    constexpr int kN = 10'000'000;
    double best = 1e30;
    volatile int sink = 0;
    for (int r = 0; r < 5; ++r) {
        const int64_t t0 = now_ns();
        for (int i = 0; i < kN; ++i) {
            SYSLM_PROFILE_SCOPE("off", i, i);
            sink = sink + 1;
        }
        best = std::min(best, static_cast<double>(now_ns() - t0) / kN);
    }
    EXPECT_LT(best, 5.0) << "ns per disabled scope";
}

}  // namespace
}  // namespace syslm::profiler
