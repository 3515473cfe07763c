// The memory of kernel choices (kernels/kernel_choices.hpp): timed once, then read; a damaged
// entry is timed again; the first stored choice wins; off and unwritable stores time every time.
#include "kernels/kernel_choices.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "kernel_choices_store.hpp"

namespace syslm::kernels {
namespace {
namespace fs = std::filesystem;
using testing::StoreAt;

bool ab(const std::string& v) {
    return v == "a" || v == "b";
}

TEST(KernelChoices, TimedOnceThenRemembered) {
    StoreAt store;
    int timed = 0;
    auto measure = [&] {
        ++timed;
        return KernelChoice{"b", "a 1 ms, b 0.5 ms", false};
    };
    const KernelChoice first = remembered_kernel_choice("test-choice", measure, ab);
    EXPECT_EQ(timed, 1);
    EXPECT_EQ(first.value, "b");
    EXPECT_FALSE(first.remembered);
    const KernelChoice again = remembered_kernel_choice("test-choice", measure, ab);
    EXPECT_EQ(timed, 1) << "read, not timed again";
    EXPECT_EQ(again.value, "b");
    EXPECT_EQ(again.timings, "a 1 ms, b 0.5 ms");
    EXPECT_TRUE(again.remembered);
    // Under this CPU's directory, which names the CPU it was timed on.
    const fs::path dir = kernel_choices_dir();
    EXPECT_TRUE(fs::exists(dir / "test-choice"));
    std::ifstream info(dir / "cpu.txt");
    std::string line;
    ASSERT_TRUE(std::getline(info, line));
    EXPECT_NE(line.find("family"), std::string::npos) << line;

    forget_kernel_choices();
    EXPECT_FALSE(fs::exists(dir));
    remembered_kernel_choice("test-choice", measure, ab);
    EXPECT_EQ(timed, 2) << "timed again after forget_kernel_choices";
}

TEST(KernelChoices, AnInvalidEntryIsTimedAgainAndReplaced) {
    StoreAt store;
    fs::create_directories(kernel_choices_dir());
    for (const char* damaged : {"", "c\nfrom another build\n", "\n"}) {
        std::ofstream(fs::path(kernel_choices_dir()) / "test-choice") << damaged;
        int timed = 0;
        const KernelChoice k = remembered_kernel_choice(
            "test-choice",
            [&] {
                ++timed;
                return KernelChoice{"a", "timed", false};
            },
            ab);
        EXPECT_EQ(timed, 1) << "stored: '" << damaged << "'";
        EXPECT_EQ(k.value, "a");
        const KernelChoice read = remembered_kernel_choice(
            "test-choice",
            [&] {
                ++timed;
                return KernelChoice{"b", "", false};
            },
            ab);
        EXPECT_EQ(read.value, "a") << "the replacement was stored";
        EXPECT_EQ(timed, 1);
    }
}

// Another process stores its choice while this one times: both then run the first one stored.
TEST(KernelChoices, TheFirstStoredChoiceWins) {
    StoreAt store;
    const KernelChoice k = remembered_kernel_choice(
        "test-choice",
        [&] {
            fs::create_directories(kernel_choices_dir());
            std::ofstream(fs::path(kernel_choices_dir()) / "test-choice") << "a\nthe other's\n";
            return KernelChoice{"b", "mine", false};
        },
        ab);
    EXPECT_EQ(k.value, "a");
    EXPECT_EQ(k.timings, "the other's");
    EXPECT_TRUE(k.remembered);
    for (const auto& e : fs::directory_iterator(kernel_choices_dir()))
        EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos)
            << "left behind: " << e.path();
}

TEST(KernelChoices, OffOrUnwritableTimesEveryCall) {
    for (const std::string where : {"off", "/proc/syslm-cannot-be-created"}) {
        StoreAt store(where);
        if (where == "off") {
            EXPECT_EQ(kernel_choices_dir(), "");
        }
        int timed = 0;
        for (int i = 0; i < 2; ++i) {
            const KernelChoice k = remembered_kernel_choice(
                "test-choice",
                [&] {
                    ++timed;
                    return KernelChoice{"a", "", false};
                },
                ab);
            EXPECT_EQ(k.value, "a");
            EXPECT_FALSE(k.remembered);
        }
        EXPECT_EQ(timed, 2) << where;
    }
}

TEST(KernelChoices, RefusesKeysThatAreNotPlainNames) {
    StoreAt store;
    auto measure = [] { return KernelChoice{"a", "", false}; };
    for (const char* key : {"", "../escape", "a/b", ".hidden"})
        EXPECT_THROW(remembered_kernel_choice(key, measure, ab), Error) << key;
    EXPECT_THROW(remembered_kernel_choice(
                     "test-choice",
                     [] {
                         return KernelChoice{"z", "", false};
                     },
                     ab),
                 Error)
        << "a timed value that fails its own check";
}

}  // namespace
}  // namespace syslm::kernels
