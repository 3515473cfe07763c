// Helpers for the data tests: a fresh directory per test, raw file bytes.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "data/loader.hpp"

namespace syslm::data::test {

// SYSLM_TEST_TMP/data/<suite>.<test>, emptied first.
inline std::string fresh_dir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::filesystem::path dir = std::filesystem::path(SYSLM_TEST_TMP) / "data" /
                                      (std::string(info->test_suite_name()) + "." + info->name());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir.string();
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline void write_text(const std::string& path, const std::string& s) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << s;
}

inline LoaderOptions opts(int batch, int seq, uint64_t seed, uint64_t n_vocab = 0,
                          uint64_t stride = 0, bool verify = true) {
    LoaderOptions o;
    o.batch = batch;
    o.seq = seq;
    o.seed = seed;
    o.n_vocab = n_vocab;
    o.stride = stride;
    o.open.verify = verify;
    return o;
}

inline std::string shared_vocab_path(const std::string& name) {
    return std::string(SYSLM_VOCAB_DIR) + "/ggml-vocab-" + name + ".gguf";
}

}  // namespace syslm::data::test
