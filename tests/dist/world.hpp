// The MPI world (or a world of one without mpirun) that every distributed test runs in.
#pragma once

#include <memory>

#include "dist/communicator.hpp"

namespace syslm::dist {

inline Communicator& world_comm() {
    static std::unique_ptr<Communicator> w = world();
    return *w;
}

}  // namespace syslm::dist
