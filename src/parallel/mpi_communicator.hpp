// Collectives over an MPI communicator (OpenMPI from Debian), for host memory. MPI is initialised
// once per process with MPI_THREAD_MULTIPLE (the data-parallel reducer's thread and the tensor-
// parallel all-reduces of the backward call it at once, on different communicators) and
// finalised at exit. Messages
// longer than MPI's int counts are sent in pieces.
#pragma once

#include <mpi.h>

#include "parallel/communicator.hpp"

namespace syslm::parallel {

class MpiCommunicator final : public Communicator {
public:
    // The world of this process (initialises MPI).
    static std::unique_ptr<MpiCommunicator> world();
    ~MpiCommunicator() override;
    std::string transport() const override { return "mpi"; }
    std::unique_ptr<Communicator> split(int color, int key) override;

protected:
    void do_all_reduce(void* data, size_t n, Elem e, Op op) override;
    void do_reduce_scatter(const float* in, float* out, std::span<const size_t> counts) override;
    void do_all_gather(float* data, std::span<const size_t> counts) override;
    void do_all_gather_bytes(void* data, std::span<const size_t> bytes) override;
    void do_all_to_all(const void* in, std::span<const size_t> send, void* out,
                       std::span<const size_t> recv) override;
    void do_broadcast(void* data, size_t bytes, int root) override;
    void do_send(const void* data, size_t bytes, int peer, int tag) override;
    void do_recv(void* data, size_t bytes, int peer, int tag) override;
    void do_send_recv(const void* send, size_t send_bytes, int dest, void* recv,
                      size_t recv_bytes, int source, int tag) override;
    void do_barrier() override;
    [[noreturn]] void abort_job(int code) override;

private:
    MpiCommunicator(MPI_Comm comm, bool owned);
    static int rank_of(MPI_Comm c);
    static int size_of(MPI_Comm c);
    MPI_Comm comm_;
    bool owned_;  // freed on destruction (split results; not MPI_COMM_WORLD)
};

}  // namespace syslm::parallel
