// Facts about this host's memory that placement decisions need, read from Linux's /proc and
// /sys (elsewhere, or when unreadable: 0 and false, so callers fall back to their safe choice).
#pragma once

#include <cstddef>

namespace syslm {

// A field of /proc/meminfo ("MemTotal", "MemAvailable", ...) in bytes; 0 when unknown.
size_t meminfo_bytes(const char* field);

// Whether transparent huge pages can back an anonymous buffer advised with MADV_HUGEPAGE
// (the kernel's mode is "always" or "madvise", not "never").
bool huge_pages_available();

}  // namespace syslm
