// For tests of remembered kernel choices (kernels/kernel_choices.hpp): a store of their own.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace syslm::kernels::testing {

// Points SYSLM_KERNEL_CACHE at a fresh directory (or a given value) while alive.
class StoreAt {
public:
    explicit StoreAt(std::string value = "") {
        if (value.empty()) {
            dir_ = std::filesystem::path(SYSLM_TEST_TMP) /
                   ("kernel-choices-" + std::to_string(::getpid()));
            std::filesystem::remove_all(dir_);
            value = dir_.string();
        }
        const char* old = std::getenv("SYSLM_KERNEL_CACHE");
        had_ = old != nullptr;
        if (had_) old_ = old;
        ::setenv("SYSLM_KERNEL_CACHE", value.c_str(), 1);
    }
    ~StoreAt() {
        if (had_)
            ::setenv("SYSLM_KERNEL_CACHE", old_.c_str(), 1);
        else
            ::unsetenv("SYSLM_KERNEL_CACHE");
        if (!dir_.empty()) std::filesystem::remove_all(dir_);
    }

private:
    std::filesystem::path dir_;
    std::string old_;
    bool had_ = false;
};

}  // namespace syslm::kernels::testing
