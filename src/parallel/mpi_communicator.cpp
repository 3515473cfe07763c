#include "parallel/mpi_communicator.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/error.hpp"

namespace syslm::parallel {

namespace {

// Errors come back as codes (not MPI's default abort) so they reach the user as messages.
void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fail("MPI ", what, " failed: ", std::string(text, static_cast<size_t>(len)));
}

void finalize_at_exit() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

void init_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (initialized) return;
        int provided = 0;
        // Multiple: data parallel's reduction thread and tensor parallel's all-reduces in the
        // backward call MPI at the same time (on different communicators).
        check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "init");
        SYSLM_CHECK(provided >= MPI_THREAD_MULTIPLE,
                    "MPI: this MPI library does not support MPI_THREAD_MULTIPLE");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        std::atexit(finalize_at_exit);
    });
}

constexpr size_t kMaxCount = INT_MAX / 8 * 8;  // elements per MPI call

}  // namespace

int MpiCommunicator::rank_of(MPI_Comm c) {
    int r = 0;
    MPI_Comm_rank(c, &r);
    return r;
}

int MpiCommunicator::size_of(MPI_Comm c) {
    int s = 0;
    MPI_Comm_size(c, &s);
    return s;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned)
    : Communicator(rank_of(comm), size_of(comm)), comm_(comm), owned_(owned) {}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
    init_once();
    return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(MPI_COMM_WORLD, false));
}

MpiCommunicator::~MpiCommunicator() {
    stop_watchdog();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
    MPI_Comm c;
    check(MPI_Comm_split(comm_, color, key, &c), "comm split");
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    return std::unique_ptr<Communicator>(new MpiCommunicator(c, true));
}

void MpiCommunicator::do_all_reduce(void* data, size_t n, Elem e, Op op) {
    const MPI_Datatype t = e == Elem::F32 ? MPI_FLOAT : MPI_DOUBLE;
    const size_t es = e == Elem::F32 ? sizeof(float) : sizeof(double);
    for (size_t at = 0; at < n; at += kMaxCount) {
        const int count = static_cast<int>(std::min(kMaxCount, n - at));
        check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + at * es, count, t,
                            op == Op::Sum ? MPI_SUM : MPI_MAX, comm_),
              "all-reduce");
    }
}

namespace {
// MPI's int counts and displacements for blocks of `counts` floats.
void int_counts(std::span<const size_t> counts, std::vector<int>& n, std::vector<int>& at) {
    n.clear();
    at.clear();
    size_t offset = 0;
    for (size_t c : counts) {
        SYSLM_CHECK(offset + c <= kMaxCount, "collective: ", offset + c,
                    " floats exceed MPI's int counts");
        n.push_back(static_cast<int>(c));
        at.push_back(static_cast<int>(offset));
        offset += c;
    }
}
}  // namespace

void MpiCommunicator::do_reduce_scatter(const float* in, float* out,
                                        std::span<const size_t> counts) {
    std::vector<int> n, at;
    int_counts(counts, n, at);
    check(MPI_Reduce_scatter(in, out, n.data(), MPI_FLOAT, MPI_SUM, comm_), "reduce-scatter");
}

void MpiCommunicator::do_all_gather(float* data, std::span<const size_t> counts) {
    std::vector<int> n, at;
    int_counts(counts, n, at);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, n.data(), at.data(), MPI_FLOAT,
                         comm_),
          "all-gather");
}

void MpiCommunicator::do_all_gather_bytes(void* data, std::span<const size_t> bytes) {
    std::vector<int> n, at;
    int_counts(bytes, n, at);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, n.data(), at.data(), MPI_BYTE,
                         comm_),
          "all-gather");
}

void MpiCommunicator::do_all_to_all(const void* in, std::span<const size_t> send, void* out,
                                    std::span<const size_t> recv) {
    std::vector<int> sn, sat, rn, rat;
    int_counts(send, sn, sat);
    int_counts(recv, rn, rat);
    check(MPI_Alltoallv(in, sn.data(), sat.data(), MPI_BYTE, out, rn.data(), rat.data(), MPI_BYTE,
                        comm_),
          "all-to-all");
}

void MpiCommunicator::do_broadcast(void* data, size_t bytes, int root) {
    for (size_t at = 0; at < bytes; at += kMaxCount) {
        const int count = static_cast<int>(std::min(kMaxCount, bytes - at));
        check(MPI_Bcast(static_cast<char*>(data) + at, count, MPI_BYTE, root, comm_), "broadcast");
    }
}

void MpiCommunicator::do_send(const void* data, size_t bytes, int peer, int tag) {
    for (size_t at = 0; at < bytes; at += kMaxCount) {
        const int count = static_cast<int>(std::min(kMaxCount, bytes - at));
        check(MPI_Send(static_cast<const char*>(data) + at, count, MPI_BYTE, peer, tag, comm_),
              "send");
    }
}

void MpiCommunicator::do_recv(void* data, size_t bytes, int peer, int tag) {
    for (size_t at = 0; at < bytes; at += kMaxCount) {
        const int count = static_cast<int>(std::min(kMaxCount, bytes - at));
        check(MPI_Recv(static_cast<char*>(data) + at, count, MPI_BYTE, peer, tag, comm_,
                       MPI_STATUS_IGNORE),
              "recv");
    }
}

void MpiCommunicator::do_send_recv(const void* send, size_t send_bytes, int dest, void* recv,
                                   size_t recv_bytes, int source, int tag) {
    SYSLM_CHECK(send_bytes <= kMaxCount && recv_bytes <= kMaxCount,
                "send_recv: messages over 2 GiB are not supported");
    check(MPI_Sendrecv(send, static_cast<int>(send_bytes), MPI_BYTE, dest, tag, recv,
                       static_cast<int>(recv_bytes), MPI_BYTE, source, tag, comm_,
                       MPI_STATUS_IGNORE),
          "send_recv");
}

void MpiCommunicator::abort_job(int code) {
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);  // mpirun ends every rank
    std::_Exit(code);
}

void MpiCommunicator::do_barrier() {
    check(MPI_Barrier(comm_), "barrier");
}

}  // namespace syslm::parallel
