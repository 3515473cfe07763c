#include "parallel/mpi_communicator.hpp"
#include "parallel/self_communicator.hpp"

namespace syslm::parallel {

std::unique_ptr<Communicator> world(bool force_mpi) {
    if (force_mpi || launched_by_mpi()) return MpiCommunicator::world();
    return std::make_unique<SelfCommunicator>();
}

}  // namespace syslm::parallel
