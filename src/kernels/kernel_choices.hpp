// Kernel choices timed once per machine and remembered on disk.
//
// Where two kernels do the same work, syslm times them on this CPU and keeps the faster: the
// prefill GEMM panels, the vec_dot / GEMM crossover, the batched dots, prefill attention and
// training's GEMMs. Kernels that time alike round differently, so a choice made anew by every
// process can flip between two runs of one command and change their results in the last bits (a
// resumed training run would then not repeat the uninterrupted one). So the first process to time
// a choice stores it, and every later process on this CPU, running this build, uses it;
// `syslm probe --refresh` times them all again.
//
// Store: <dir>/<signature>/<key>, one small file per choice: the value on the first line, what was
// timed on the second. <dir> is $SYSLM_KERNEL_CACHE, else $XDG_CACHE_HOME/syslm/kernels, else
// ~/.cache/syslm/kernels; SYSLM_KERNEL_CACHE=off times in every process, as where the store cannot
// be written. <signature> hashes the CPU (vendor, brand, family, model, stepping, features), the
// active ISA and the executable (its size and time), so a rebuilt kernel is timed again. A new
// choice is linked into place only where none exists: two processes timing at once both use the
// one stored first.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace syslm::kernels {

struct KernelChoice {
    std::string value;        // e.g. "blas", "32"
    std::string timings;      // what was timed and the figures, one line, for `syslm probe`
    bool remembered = false;  // read from the store rather than timed by this process
};

// The stored choice for `key` (letters, digits, '-', '_', '.') on this CPU. Where none is stored,
// or its value fails `valid` (another build's, a damaged file), runs `measure`, stores the result
// and returns it, or the choice another process stored first.
KernelChoice remembered_kernel_choice(const std::string& key,
                                      const std::function<KernelChoice()>& measure,
                                      const std::function<bool(const std::string&)>& valid);

// The two halves, for a choice made over a process's own work (decode's row streams): the stored
// choice for `key` where a valid one exists; and `c` stored unless a valid one is there already,
// returning the one in force (c itself where the store cannot be written).
std::optional<KernelChoice> stored_kernel_choice(
    const std::string& key, const std::function<bool(const std::string&)>& valid);
KernelChoice store_kernel_choice(const std::string& key, const KernelChoice& c,
                                 const std::function<bool(const std::string&)>& valid);

// The directory holding this CPU's choices; empty where SYSLM_KERNEL_CACHE=off.
std::string kernel_choices_dir();

// Removes this CPU's stored choices (`probe --refresh`). Choices this process made stay in force.
void forget_kernel_choices();

}  // namespace syslm::kernels
