#include "core/checksum.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.hpp"

namespace syslm {
namespace {

constexpr uint64_t kPrime = 0x100000001b3ull;

uint64_t load_u64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);  // little-endian hosts only (x86-64, as the rest of syslm)
    return v;
}

}  // namespace

void WordHash::update(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    if (n_pending_ > 0) {  // complete the word an earlier update began
        const size_t take = std::min(n, 8 - n_pending_);
        std::memcpy(pending_ + n_pending_, p, take);
        n_pending_ += take;
        p += take;
        n -= take;
        if (n_pending_ < 8) return;
        h_ = (h_ ^ load_u64(pending_)) * kPrime;
        n_pending_ = 0;
    }
    uint64_t h = h_;
    const size_t words = n / 8;
    for (size_t i = 0; i < words; ++i) h = (h ^ load_u64(p + 8 * i)) * kPrime;
    h_ = h;
    n_pending_ = n - 8 * words;
    std::memcpy(pending_, p + 8 * words, n_pending_);
}

uint64_t WordHash::value() const {
    uint64_t h = h_;
    for (size_t i = 0; i < n_pending_; ++i) h = (h ^ pending_[i]) * kPrime;
    return h;
}

std::string word_hash_name(std::string_view text) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx",
                  static_cast<unsigned long long>(
                      word_hash({reinterpret_cast<const uint8_t*>(text.data()), text.size()})));
    return buf;
}

uint64_t file_word_hash(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
    std::vector<uint8_t> buf(size_t{1} << 20);
    WordHash h;
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int e = errno;
            ::close(fd);
            fail(path, ": read failed: ", std::strerror(e));
        }
        if (n == 0) break;
        h.update(buf.data(), static_cast<size_t>(n));
    }
    ::close(fd);
    return h.value();
}

}  // namespace syslm
