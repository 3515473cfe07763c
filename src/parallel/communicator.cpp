#include "parallel/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.hpp"
#include "parallel/watchdog.hpp"

namespace syslm::parallel {

const char* collective_name(Collective c) {
    switch (c) {
        case Collective::AllReduce: return "all_reduce";
        case Collective::ReduceScatter: return "reduce_scatter";
        case Collective::AllGather: return "all_gather";
        case Collective::AllToAll: return "all_to_all";
        case Collective::Broadcast: return "broadcast";
        case Collective::Send: return "send";
        case Collective::Recv: return "recv";
        case Collective::Barrier: return "barrier";
    }
    return "?";
}

Communicator::~Communicator() { stop_watchdog(); }

void Communicator::stop_watchdog() { watchdog_.reset(); }

void Communicator::abort_job(int code) {
    std::fflush(stderr);
    std::_Exit(code);
}

void Communicator::set_timeout(double seconds) {
    SYSLM_CHECK(seconds >= 0 && std::isfinite(seconds), "communicator: timeout ", seconds,
                " s is not a duration");
    timeout_s_ = seconds;
    if (seconds > 0 && !watchdog_)
        watchdog_ = std::make_unique<Watchdog>([this](const std::string& what, double waited) {
            // The CLI's error convention (cli/command.hpp): one `syslm: error:` line, status 1.
            std::fprintf(stderr,
                         "syslm: error: rank %d of %d: %s has not completed after %.0f s%s%s: "
                         "another rank died or hangs; aborting the job\n",
                         rank_, size_, what.c_str(), waited, context_.empty() ? "" : " in ",
                         context_.c_str());
            abort_job(1);
        });
}

void Communicator::set_context(std::string context) { context_ = std::move(context); }

template <class F>
void Communicator::timed(Collective c, uint64_t bytes, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    if (watchdog_ && timeout_s_ > 0) {
        CollectiveStats& s = stats_[static_cast<int>(c)];
        watchdog_->arm(timeout_s_, std::string(collective_name(c)) + " #" +
                                       std::to_string(s.calls + 1) + " (" +
                                       std::to_string(bytes) + " bytes)");
    }
    f();
    if (watchdog_) watchdog_->disarm();
    CollectiveStats& s = stats_[static_cast<int>(c)];
    s.calls += 1;
    s.bytes += bytes;
    s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace {
// Ring algorithms: all-reduce sends 2(p-1)/p of the buffer, reduce-scatter and all-gather
// (p-1)/p of the full buffer.
uint64_t ring(uint64_t bytes, int p, int factor) {
    return p <= 1 ? 0 : factor * bytes * static_cast<uint64_t>(p - 1) / static_cast<uint64_t>(p);
}
}  // namespace

void Communicator::all_reduce_sum(float* data, size_t n) {
    timed(Collective::AllReduce, ring(n * sizeof(float), size_, 2),
          [&] { do_all_reduce(data, n, Elem::F32, Op::Sum); });
}

void Communicator::all_reduce_sum(double* data, size_t n) {
    timed(Collective::AllReduce, ring(n * sizeof(double), size_, 2),
          [&] { do_all_reduce(data, n, Elem::F64, Op::Sum); });
}

void Communicator::all_reduce_max(float* data, size_t n) {
    timed(Collective::AllReduce, ring(n * sizeof(float), size_, 2),
          [&] { do_all_reduce(data, n, Elem::F32, Op::Max); });
}

// Ring reduce-scatter and all-gather: each rank sends every block but one.
uint64_t Communicator::block_bytes(std::span<const size_t> counts, size_t elem) const {
    SYSLM_CHECK(static_cast<int>(counts.size()) == size_, "collective: ", counts.size(),
                " block sizes for a group of ", size_);
    size_t total = 0;
    for (size_t c : counts) total += c;
    return size_ <= 1 ? 0 : (total - counts[static_cast<size_t>(rank_)]) * elem;
}

void Communicator::reduce_scatter_sum(const float* in, float* out, size_t n) {
    const std::vector<size_t> counts(static_cast<size_t>(size_), n);
    reduce_scatter_sum(in, out, counts);
}

void Communicator::reduce_scatter_sum(const float* in, float* out, std::span<const size_t> counts) {
    timed(Collective::ReduceScatter, block_bytes(counts),
          [&] { do_reduce_scatter(in, out, counts); });
}

void Communicator::all_gather(const float* in, float* out, size_t n) {
    const std::vector<size_t> counts(static_cast<size_t>(size_), n);
    std::copy_n(in, n, out + n * static_cast<size_t>(rank_));
    all_gather_in_place(out, counts);
}

void Communicator::all_gather_in_place(float* data, std::span<const size_t> counts) {
    timed(Collective::AllGather, block_bytes(counts), [&] { do_all_gather(data, counts); });
}

void Communicator::all_gather_bytes_in_place(void* data, std::span<const size_t> bytes) {
    timed(Collective::AllGather, block_bytes(bytes, 1), [&] { do_all_gather_bytes(data, bytes); });
}

void Communicator::all_to_all(const void* in, std::span<const size_t> send, void* out,
                              std::span<const size_t> recv) {
    SYSLM_CHECK(static_cast<int>(recv.size()) == size_, "all-to-all: ", recv.size(),
                " receive sizes for a group of ", size_);
    timed(Collective::AllToAll, block_bytes(send, 1),
          [&] { do_all_to_all(in, send, out, recv); });
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
    SYSLM_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " outside a group of ", size_);
    timed(Collective::Broadcast, size_ > 1 && rank_ == root ? bytes : 0,
          [&] { do_broadcast(data, bytes, root); });
}

void Communicator::send(const void* data, size_t bytes, int peer, int tag) {
    SYSLM_CHECK(peer >= 0 && peer < size_ && peer != rank_, "send: rank ", rank_,
                " cannot send to ", peer, " in a group of ", size_);
    timed(Collective::Send, bytes, [&] { do_send(data, bytes, peer, tag); });
}

void Communicator::recv(void* data, size_t bytes, int peer, int tag) {
    SYSLM_CHECK(peer >= 0 && peer < size_ && peer != rank_, "recv: rank ", rank_,
                " cannot receive from ", peer, " in a group of ", size_);
    timed(Collective::Recv, 0, [&] { do_recv(data, bytes, peer, tag); });
}

void Communicator::send_recv(const void* send, size_t send_bytes, int dest, void* recv,
                             size_t recv_bytes, int source, int tag) {
    SYSLM_CHECK(dest >= 0 && dest < size_ && dest != rank_ && source >= 0 && source < size_ &&
                    source != rank_,
                "send_recv: rank ", rank_, " cannot exchange with ", dest, " / ", source,
                " in a group of ", size_);
    timed(Collective::Send, send_bytes,
          [&] { do_send_recv(send, send_bytes, dest, recv, recv_bytes, source, tag); });
}

void Communicator::barrier() {
    timed(Collective::Barrier, 0, [&] { do_barrier(); });
}

uint64_t Communicator::bytes_sent() const {
    uint64_t b = 0;
    for (const CollectiveStats& s : stats_) b += s.bytes;
    return b;
}

bool launched_by_mpi() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"})
        if (std::getenv(v)) return true;
    return false;
}

}  // namespace syslm::parallel
