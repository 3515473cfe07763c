#include "parallel/recompute.hpp"

#include "core/error.hpp"

namespace syslm::parallel {

namespace {
constexpr Recompute kAll[] = {Recompute::None, Recompute::Selective, Recompute::Full};
constexpr const char* kNames[] = {"none", "selective", "full"};  // in kAll's order
}  // namespace

const char* recompute_name(Recompute r) {
    return kNames[static_cast<int>(r)];
}

Recompute recompute_policy(const std::string& name) {
    for (Recompute r : kAll)
        if (name == recompute_name(r)) return r;
    fail("recompute policy '", name, "': expected none, selective or full");
}

}  // namespace syslm::parallel
