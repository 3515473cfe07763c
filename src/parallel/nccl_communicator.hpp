// Collectives over NCCL for device memory: every pointer given to this communicator is a CUDA
// device pointer, every call completes (stream synchronised) before it returns. One rank per GPU;
// the clique is bootstrapped over another communicator (MPI) that broadcasts NCCL's unique id.
// Built when CMake finds the CUDA toolkit and NCCL (SYSLM_HAVE_NCCL); elsewhere this header
// declares nothing and nccl_available() is false.
#pragma once

#include <memory>

#include "parallel/communicator.hpp"

namespace syslm::parallel {

// Whether this build has NCCL and a CUDA device is visible (tests skip without one).
bool nccl_available();

#ifdef SYSLM_HAVE_NCCL
int cuda_device_count();  // 0 without a driver or device

class NcclCommunicator final : public Communicator {
public:
    // The ranks of `bootstrap` as one NCCL clique, this rank on CUDA device `device`.
    static std::unique_ptr<NcclCommunicator> create(Communicator& bootstrap, int device);
    ~NcclCommunicator() override;
    std::string transport() const override { return "nccl"; }
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
    struct Impl;
    NcclCommunicator(std::unique_ptr<Impl> impl, int rank, int size);
    void gather_blocks(void* data, std::span<const size_t> counts, size_t elem);
    std::unique_ptr<Impl> impl_;
};
#endif

}  // namespace syslm::parallel
