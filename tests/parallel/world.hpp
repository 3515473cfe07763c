// The MPI world (or a world of one without mpirun) that every distributed test runs in.
#pragma once

#include <memory>

#include "parallel/communicator.hpp"

namespace syslm::parallel {

inline Communicator& world_comm() {
    static std::unique_ptr<Communicator> w = world();
    return *w;
}

}  // namespace syslm::parallel
