#include "parallel/recompute.hpp"

#include "core/error.hpp"

namespace syslm::parallel {

const char* recompute_name(Recompute r) {
    switch (r) {
        case Recompute::None:
            return "none";
        case Recompute::Selective:
            return "selective";
        case Recompute::Full:
            return "full";
    }
    return "?";
}

Recompute recompute_policy(const std::string& name) {
    for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
        if (name == recompute_name(r)) return r;
    fail("recompute policy '", name, "': expected none, selective or full");
}

}  // namespace syslm::parallel
