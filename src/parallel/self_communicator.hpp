// A world of one rank: collectives are copies, point to point has no peer. Single-process runs
// use it so training has one code path.
#pragma once

#include "parallel/communicator.hpp"

namespace syslm::parallel {

class SelfCommunicator final : public Communicator {
public:
    SelfCommunicator() : Communicator(0, 1) {}
    std::string transport() const override { return "self"; }
    std::unique_ptr<Communicator> split(int color, int key) override;

protected:
    void do_all_reduce(void*, size_t, Elem, Op) override {}
    void do_reduce_scatter(const float* in, float* out, std::span<const size_t> counts) override;
    void do_all_gather(float* data, std::span<const size_t> counts) override;
    void do_all_gather_bytes(void* data, std::span<const size_t> bytes) override;
    void do_all_to_all(const void* in, std::span<const size_t> send, void* out,
                       std::span<const size_t> recv) override;
    void do_broadcast(void*, size_t, int) override {}
    void do_send(const void*, size_t, int, int) override;
    void do_recv(void*, size_t, int, int) override;
    void do_send_recv(const void*, size_t, int, void*, size_t, int, int) override;
    void do_barrier() override {}
};

}  // namespace syslm::parallel
