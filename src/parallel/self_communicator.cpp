#include "parallel/self_communicator.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace syslm::parallel {

std::unique_ptr<Communicator> SelfCommunicator::split(int, int) {
    return std::make_unique<SelfCommunicator>();
}

void SelfCommunicator::do_reduce_scatter(const float* in, float* out,
                                         std::span<const size_t> counts) {
    if (in != out) std::copy_n(in, counts[0], out);
}

void SelfCommunicator::do_all_gather(float*, std::span<const size_t>) {}

void SelfCommunicator::do_all_gather_bytes(void*, std::span<const size_t>) {}

void SelfCommunicator::do_all_to_all(const void* in, std::span<const size_t> send, void* out,
                                     std::span<const size_t>) {
    if (in != out) std::memcpy(out, in, send[0]);
}

void SelfCommunicator::do_send(const void*, size_t, int peer, int) {
    fail("send: a single-rank world has no rank ", peer);
}

void SelfCommunicator::do_recv(void*, size_t, int peer, int) {
    fail("recv: a single-rank world has no rank ", peer);
}

void SelfCommunicator::do_send_recv(const void*, size_t, int peer, void*, size_t, int, int) {
    fail("send_recv: a single-rank world has no rank ", peer);
}

}  // namespace syslm::parallel
