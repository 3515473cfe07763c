// One interface over the transports distributed training runs on: MPI for host memory
// (mpi_communicator), NCCL for device memory (nccl_communicator, with CUDA), and a world of one
// rank (self_communicator) so single-process runs take the same code path. Every call is a
// collective of the whole group unless it says otherwise, and is counted: calls, the bytes this
// rank puts on the wire under the ring algorithms (the bandwidth-optimal ones NCCL and OpenMPI
// use for large messages; docs/design/distributed.md), and the time spent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "parallel/watchdog.hpp"

namespace syslm::parallel {

enum class Collective {
    AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast, Send, Recv, Barrier
};
constexpr int kCollectives = 8;
const char* collective_name(Collective c);

struct CollectiveStats {
    uint64_t calls = 0;
    uint64_t bytes = 0;  // sent by this rank
    double seconds = 0;
};

class Communicator {
public:
    virtual ~Communicator();
    int rank() const { return rank_; }
    int size() const { return size_; }
    virtual std::string transport() const = 0;  // "mpi", "nccl", "self"

    // In place: every rank ends with the element-wise sum over the group.
    void all_reduce_sum(float* data, size_t n);
    void all_reduce_sum(double* data, size_t n);
    void all_reduce_max(float* data, size_t n);  // element-wise maximum
    // in: size() x n floats, block r for rank r; out: n floats, the sum of every rank's block
    // rank().
    void reduce_scatter_sum(const float* in, float* out, size_t n);
    // The same with blocks of counts[r] floats, one after the other in `in`.
    void reduce_scatter_sum(const float* in, float* out, std::span<const size_t> counts);
    // in: n floats; out: size() x n, rank r's in at block r.
    void all_gather(const float* in, float* out, size_t n);
    // data: blocks of counts[r] floats one after the other, this rank's filled in; afterwards
    // every block holds its rank's.
    void all_gather_in_place(float* data, std::span<const size_t> counts);
    // Bytes (compressed gradients): blocks of bytes[r] one after the other.
    void all_gather_bytes_in_place(void* data, std::span<const size_t> bytes);
    // in: send[r] bytes for rank r, one block after the other; out: recv[r] bytes from rank r.
    void all_to_all(const void* in, std::span<const size_t> send, void* out,
                    std::span<const size_t> recv);
    void broadcast(void* data, size_t bytes, int root);
    // Point to point (not collective): blocks until matched.
    void send(const void* data, size_t bytes, int peer, int tag);
    void recv(void* data, size_t bytes, int peer, int tag);
    // Both at once (no deadlock when two ranks exchange): pipeline schedules' steady state.
    void send_recv(const void* send, size_t send_bytes, int dest, void* recv, size_t recv_bytes,
                   int source, int tag);
    void barrier();
    // The ranks with the same color form a group, ordered by key (MPI_Comm_split).
    virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

    // Fault detection: a call that has not completed after `seconds` (0: never) means another
    // rank died or hangs; the watchdog prints which call on which rank waited, with `context`
    // (e.g. the training step), and aborts the whole job (MPI_Abort), so no rank waits forever.
    void set_timeout(double seconds);
    void set_context(std::string context);

    const CollectiveStats& stats(Collective c) const { return stats_[static_cast<int>(c)]; }
    uint64_t bytes_sent() const;  // over every kind
    void reset_stats() { stats_ = {}; }

protected:
    Communicator(int rank, int size) : rank_(rank), size_(size) {}
    enum class Elem { F32, F64 };
    enum class Op { Sum, Max };
    virtual void do_all_reduce(void* data, size_t n, Elem e, Op op) = 0;
    virtual void do_reduce_scatter(const float* in, float* out, std::span<const size_t> counts) = 0;
    virtual void do_all_gather(float* data, std::span<const size_t> counts) = 0;
    virtual void do_all_gather_bytes(void* data, std::span<const size_t> bytes) = 0;
    virtual void do_all_to_all(const void* in, std::span<const size_t> send, void* out,
                               std::span<const size_t> recv) = 0;
    virtual void do_broadcast(void* data, size_t bytes, int root) = 0;
    virtual void do_send(const void* data, size_t bytes, int peer, int tag) = 0;
    virtual void do_recv(void* data, size_t bytes, int peer, int tag) = 0;
    virtual void do_send_recv(const void* send, size_t send_bytes, int dest, void* recv,
                              size_t recv_bytes, int source, int tag) = 0;
    virtual void do_barrier() = 0;
    // Ends every process of the job with this exit code (the watchdog's last resort).
    [[noreturn]] virtual void abort_job(int code);
    // Subclasses stop the watchdog first in their destructors (it may call abort_job).
    void stop_watchdog();

private:
    template <class F>
    void timed(Collective c, uint64_t bytes, F&& f);
    uint64_t block_bytes(std::span<const size_t> counts, size_t elem = sizeof(float)) const;
    int rank_, size_;
    std::array<CollectiveStats, kCollectives> stats_{};
    double timeout_s_ = 0;
    std::string context_;
    std::unique_ptr<Watchdog> watchdog_;
};

// The world of this process: MPI's when it was started by mpirun (or `force_mpi`), a world of
// one rank otherwise. MPI is initialised on first use and finalised at exit.
std::unique_ptr<Communicator> world(bool force_mpi = false);
// Whether this process was started by an MPI launcher (OpenMPI / PMIx / Hydra environment).
bool launched_by_mpi();

}  // namespace syslm::parallel
