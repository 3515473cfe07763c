// Kernel variants by instruction set. Each kernel has a scalar reference; faster variants live in
// files named *_avx2.cpp (AVX2 + FMA + F16C) and *_avx512.cpp (AVX-512 F/BW/VL/DQ + VNNI), which
// CMake compiles with those ISA flags and nothing else does. The variant used is the best the
// running CPU supports (cpu_features), optionally capped by the environment variable
// SYSLM_ISA=scalar|avx2|avx512 — so every variant can be tested and benchmarked on one machine.
//
// Rule for ISA files: only functions with internal linkage (anonymous namespace) plus the
// registration function; no std:: templates or inline functions with external linkage, because
// the linker could pick their ISA-compiled copy for code that runs on any CPU.
#pragma once

namespace syslm::kernels {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

const char* isa_name(Isa isa);
bool isa_supported(Isa isa);  // by this CPU
Isa active_isa();             // best supported, capped by SYSLM_ISA

}  // namespace syslm::kernels
