// Memory bandwidth as the engine sees it: a buffer far larger than the last-level cache streamed
// by every thread of a pool with SIMD kernels (kernels/cpu/peak.hpp) of the active ISA and below.
// The best of several passes is kept, as STREAM does, so that a momentary disturbance does not
// count.
#pragma once

#include <cstddef>

#include "core/thread_pool.hpp"

namespace syslm::profile {

// Huge pages (2 MiB, transparent) spare the TLB: with 4 KiB pages, and more so in a VM whose
// nested page tables double the walk, streaming is slower. Weights read from a mmap'd file sit
// in 4 KiB page-cache pages, so both figures matter.
enum class Pages { Small, Huge };

// GB/s (1e9 bytes) of a sum reduction over `bytes` bytes split evenly over the pool's threads.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int passes,
                              Pages pages = Pages::Huge);
// GB/s of copying `bytes` bytes into a second buffer; bytes read + bytes written, as STREAM's
// Copy counts them.
double measure_copy_bandwidth(ThreadPool& pool, size_t bytes, int passes,
                              Pages pages = Pages::Huge);

}  // namespace syslm::profile
