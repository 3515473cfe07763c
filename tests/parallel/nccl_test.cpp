// The NCCL communicator on device buffers against the sums computed on the host, with uneven
// blocks; one rank per GPU. Builds where CMake found CUDA and NCCL; skips without a CUDA device
// or with fewer devices than ranks.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "parallel/communicator.hpp"
#include "world.hpp"
#include "parallel/nccl_communicator.hpp"

#ifdef SYSLM_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace syslm::parallel {
namespace {

#ifdef SYSLM_HAVE_NCCL
std::vector<float> data_of(int rank, size_t n) {
    std::mt19937 rng(static_cast<uint32_t>(rank) * 7u + 1u);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

struct DeviceBuffer {
    float* p = nullptr;
    explicit DeviceBuffer(const std::vector<float>& host) {
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), host.size() * sizeof(float)), cudaSuccess);
        cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
    }
    ~DeviceBuffer() { cudaFree(p); }
    std::vector<float> host(size_t n) const {
        std::vector<float> v(n);
        cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
        return v;
    }
};
#endif

TEST(Nccl, CollectivesOnDeviceBuffersMatchHostSums) {
#ifndef SYSLM_HAVE_NCCL
    GTEST_SKIP() << "built without CUDA / NCCL";
#else
    Communicator& boot = world_comm();
    const int devices = cuda_device_count();
    if (devices == 0) GTEST_SKIP() << "no CUDA device";
    if (devices < boot.size()) GTEST_SKIP() << boot.size() << " ranks on " << devices << " GPUs";
    auto c = NcclCommunicator::create(boot, boot.rank() % devices);
    const int p = c->size();
    const size_t n = 100003;
    DeviceBuffer d(data_of(c->rank(), n));
    c->all_reduce_sum(d.p, n);
    std::vector<double> want(n, 0.0);
    for (int r = 0; r < p; ++r) {
        const std::vector<float> v = data_of(r, n);
        for (size_t i = 0; i < n; ++i) want[i] += v[i];
    }
    const std::vector<float> got = d.host(n);
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;

    // Uneven blocks: reduce-scatter then in-place all-gather is an all-reduce.
    std::vector<size_t> counts;
    for (int r = 0; r < p; ++r) counts.push_back(1000 + 17 * static_cast<size_t>(r));
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    size_t at = 0;
    for (int r = 0; r < c->rank(); ++r) at += counts[r];
    DeviceBuffer in(data_of(c->rank() + 10, total));
    c->reduce_scatter_sum(in.p, in.p + at, counts);
    c->all_gather_in_place(in.p, counts);
    const std::vector<float> all = in.host(total);
    std::vector<double> sums(total, 0.0);
    for (int r = 0; r < p; ++r) {
        const std::vector<float> v = data_of(r + 10, total);
        for (size_t i = 0; i < total; ++i) sums[i] += v[i];
    }
    for (size_t i = 0; i < total; ++i) ASSERT_NEAR(all[i], sums[i], 1e-5) << i;
    c->barrier();
#endif
}

}  // namespace
}  // namespace syslm::parallel
