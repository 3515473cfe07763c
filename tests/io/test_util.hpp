// Helpers shared by the io tests: scratch paths, whole-file reads, and the message of an Error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace syslm::io::test {

// A path in the build's test scratch directory (created if missing).
inline std::string tmp_path(const std::string& name) {
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    return std::string(SYSLM_TEST_TMP) + "/" + name;
}

inline std::vector<uint8_t> read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The message of the Error f() throws, or "<no error>".
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace syslm::io::test
