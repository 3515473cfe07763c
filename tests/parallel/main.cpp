// GoogleTest under MPI: every rank runs every test (collectives need the whole group); a failure
// on any rank makes that rank, and so mpirun, exit non-zero. Only rank 0 prints the progress;
// the other ranks print their failures.
#include <gtest/gtest.h>

#include <cstdio>

#include "parallel/communicator.hpp"

namespace {

class FailuresOnly : public ::testing::EmptyTestEventListener {
public:
    explicit FailuresOnly(int rank) : rank_(rank) {}
    void OnTestPartResult(const ::testing::TestPartResult& r) override {
        if (r.failed())
            std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                         r.line_number(), r.message());
    }

private:
    int rank_;
};

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    const int rank = syslm::parallel::world()->rank();  // initialises MPI when launched by mpirun
    if (rank != 0) {
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
        listeners.Append(new FailuresOnly(rank));
    }
    return RUN_ALL_TESTS();
}
