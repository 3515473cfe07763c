#include "parallel/nccl_communicator.hpp"

#ifdef SYSLM_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.hpp"
#endif

namespace syslm::parallel {

#ifndef SYSLM_HAVE_NCCL

bool nccl_available() { return false; }

#else

namespace {

void cuda_check(cudaError_t rc, const char* what) {
    if (rc != cudaSuccess) fail("CUDA ", what, " failed: ", cudaGetErrorString(rc));
}

void nccl_check(ncclResult_t rc, const char* what) {
    if (rc != ncclSuccess) fail("NCCL ", what, " failed: ", ncclGetErrorString(rc));
}

bool all_equal(std::span<const size_t> counts) {
    for (size_t c : counts)
        if (c != counts[0]) return false;
    return true;
}

}  // namespace

int cuda_device_count() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

bool nccl_available() { return cuda_device_count() > 0; }

struct NcclCommunicator::Impl {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    int device = 0;
    float* scratch = nullptr;  // one float on the device, for barriers
    void sync(const char* what) const { cuda_check(cudaStreamSynchronize(stream), what); }
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl, int rank, int size)
    : Communicator(rank, size), impl_(std::move(impl)) {}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap, int device) {
    const int devices = cuda_device_count();
    SYSLM_CHECK(device >= 0 && device < devices, "NCCL: rank ", bootstrap.rank(),
                " asked for CUDA device ", device, " of ", devices);
    auto impl = std::make_unique<Impl>();
    impl->device = device;
    cuda_check(cudaSetDevice(device), "set device");
    cuda_check(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking), "stream create");
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&impl->scratch), sizeof(float)), "malloc");
    ncclUniqueId id;
    if (bootstrap.rank() == 0) nccl_check(ncclGetUniqueId(&id), "unique id");
    bootstrap.broadcast(&id, sizeof id, 0);
    nccl_check(ncclCommInitRank(&impl->comm, bootstrap.size(), id, bootstrap.rank()), "init");
    return std::unique_ptr<NcclCommunicator>(
        new NcclCommunicator(std::move(impl), bootstrap.rank(), bootstrap.size()));
}

NcclCommunicator::~NcclCommunicator() {
    stop_watchdog();
    if (impl_->comm) ncclCommDestroy(impl_->comm);
    if (impl_->scratch) cudaFree(impl_->scratch);
    if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
    auto impl = std::make_unique<Impl>();
    impl->device = impl_->device;
    cuda_check(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking), "stream create");
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&impl->scratch), sizeof(float)), "malloc");
    nccl_check(ncclCommSplit(impl_->comm, color, key, &impl->comm, nullptr), "comm split");
    int rank = 0, size = 0;
    nccl_check(ncclCommUserRank(impl->comm, &rank), "comm rank");
    nccl_check(ncclCommCount(impl->comm, &size), "comm count");
    return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(impl), rank, size));
}

void NcclCommunicator::do_all_reduce(void* data, size_t n, Elem e, Op op) {
    nccl_check(ncclAllReduce(data, data, n, e == Elem::F32 ? ncclFloat32 : ncclFloat64,
                             op == Op::Sum ? ncclSum : ncclMax, impl_->comm, impl_->stream),
               "all-reduce");
    impl_->sync("all-reduce");
}

void NcclCommunicator::do_reduce_scatter(const float* in, float* out,
                                         std::span<const size_t> counts) {
    if (all_equal(counts)) {
        nccl_check(ncclReduceScatter(in, out, counts[0], ncclFloat32, ncclSum, impl_->comm,
                                     impl_->stream),
                   "reduce-scatter");
    } else {  // uneven blocks: one reduce per block, to its owner
        nccl_check(ncclGroupStart(), "group start");
        size_t at = 0;
        for (int r = 0; r < size(); ++r) {
            nccl_check(ncclReduce(in + at, r == rank() ? out : nullptr, counts[r], ncclFloat32,
                                  ncclSum, r, impl_->comm, impl_->stream),
                       "reduce");
            at += counts[r];
        }
        nccl_check(ncclGroupEnd(), "group end");
    }
    impl_->sync("reduce-scatter");
}

void NcclCommunicator::gather_blocks(void* data, std::span<const size_t> counts, size_t elem) {
    char* base = static_cast<char*>(data);
    if (all_equal(counts)) {  // in place: this rank's block is already at its offset
        const size_t bytes = counts[0] * elem;
        nccl_check(ncclAllGather(base + bytes * rank(), base, bytes, ncclUint8, impl_->comm,
                                 impl_->stream),
                   "all-gather");
    } else {  // uneven blocks: each owner broadcasts its block
        nccl_check(ncclGroupStart(), "group start");
        size_t at = 0;
        for (int r = 0; r < size(); ++r) {
            nccl_check(ncclBroadcast(base + at, base + at, counts[r] * elem, ncclUint8, r,
                                     impl_->comm, impl_->stream),
                       "broadcast");
            at += counts[r] * elem;
        }
        nccl_check(ncclGroupEnd(), "group end");
    }
    impl_->sync("all-gather");
}

void NcclCommunicator::do_all_gather(float* data, std::span<const size_t> counts) {
    gather_blocks(data, counts, sizeof(float));
}

void NcclCommunicator::do_all_gather_bytes(void* data, std::span<const size_t> bytes) {
    gather_blocks(data, bytes, 1);
}

void NcclCommunicator::do_all_to_all(const void* in, std::span<const size_t> send, void* out,
                                     std::span<const size_t> recv) {
    const char* src = static_cast<const char*>(in);
    char* dst = static_cast<char*>(out);
    nccl_check(ncclGroupStart(), "group start");
    size_t s = 0, d = 0;
    for (int r = 0; r < size(); ++r) {
        if (r == rank()) {
            if (send[r]) cuda_check(cudaMemcpyAsync(dst + d, src + s, send[r],
                                                    cudaMemcpyDeviceToDevice, impl_->stream),
                                    "copy");
        } else {
            if (send[r]) nccl_check(ncclSend(src + s, send[r], ncclUint8, r, impl_->comm, impl_->stream), "send");
            if (recv[r]) nccl_check(ncclRecv(dst + d, recv[r], ncclUint8, r, impl_->comm, impl_->stream), "recv");
        }
        s += send[r];
        d += recv[r];
    }
    nccl_check(ncclGroupEnd(), "group end");
    impl_->sync("all-to-all");
}

void NcclCommunicator::do_broadcast(void* data, size_t bytes, int root) {
    nccl_check(ncclBroadcast(data, data, bytes, ncclUint8, root, impl_->comm, impl_->stream),
               "broadcast");
    impl_->sync("broadcast");
}

// NCCL has no tags: messages between two ranks arrive in the order they were sent.
void NcclCommunicator::do_send(const void* data, size_t bytes, int peer, int) {
    nccl_check(ncclSend(data, bytes, ncclUint8, peer, impl_->comm, impl_->stream), "send");
    impl_->sync("send");
}

void NcclCommunicator::do_recv(void* data, size_t bytes, int peer, int) {
    nccl_check(ncclRecv(data, bytes, ncclUint8, peer, impl_->comm, impl_->stream), "recv");
    impl_->sync("recv");
}

void NcclCommunicator::do_send_recv(const void* send, size_t send_bytes, int dest, void* recv,
                                    size_t recv_bytes, int source, int) {
    nccl_check(ncclGroupStart(), "group start");
    nccl_check(ncclSend(send, send_bytes, ncclUint8, dest, impl_->comm, impl_->stream), "send");
    nccl_check(ncclRecv(recv, recv_bytes, ncclUint8, source, impl_->comm, impl_->stream), "recv");
    nccl_check(ncclGroupEnd(), "group end");
    impl_->sync("send_recv");
}

void NcclCommunicator::do_barrier() {
    nccl_check(ncclAllReduce(impl_->scratch, impl_->scratch, 1, ncclFloat32, ncclSum, impl_->comm,
                             impl_->stream),
               "barrier");
    impl_->sync("barrier");
}

void NcclCommunicator::abort_job(int code) {
    ncclCommAbort(impl_->comm);
    impl_->comm = nullptr;
    std::fflush(stderr);
    std::_Exit(code);
}

#endif

}  // namespace syslm::parallel
