// Errors: every failure is an exception that says what went wrong and where (file, tensor,
// byte offset, request field). Callers at the edge (CLI, server) print e.what() and exit/reply.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace syslm {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Concatenates any streamable arguments into one string.
template <class... Args>
std::string cat(Args&&... args) {
    std::ostringstream os;
    (os << ... << std::forward<Args>(args));
    return os.str();
}

template <class... Args>
[[noreturn]] void fail(Args&&... args) {
    throw Error(cat(std::forward<Args>(args)...));
}

#define SYSLM_CHECK(cond, ...)                   \
    do {                                         \
        if (!(cond)) ::syslm::fail(__VA_ARGS__); \
    } while (0)

}  // namespace syslm
