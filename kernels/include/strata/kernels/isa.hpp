#pragma once

/// \file
/// The instruction-set path of the CPU kernels' vector loops (activations, softmax, optimisers,
/// norms, elementwise), chosen at run time.
///
/// The library is built for baseline x86-64; its hot non-GEMM loops are also compiled for AVX2
/// and AVX-512, and each kernel call runs the path that is active. By default that is the widest
/// path the CPU supports; the environment variable `STRATA_CPU_ISA=baseline|avx2|avx512|auto`,
/// read once on the first kernel call, or set_isa() overrides it. Every path gives bitwise the
/// same results (no FMA contraction, the same reduction order), so the choice changes speed
/// only. Non-x86-64 builds have the baseline path alone. See docs/kernels.md.

namespace strata::kernels::cpu {

/// A code path of the CPU kernels' vector loops.
enum class cpu_isa {
  baseline,  ///< the build's own target (x86-64: SSE2)
  avx2,      ///< x86-64 AVX2, 256-bit vectors (no FMA, see the file comment)
  avx512,    ///< x86-64 AVX-512 F/BW/DQ/VL, 512-bit vectors
};

/// "baseline", "avx2" or "avx512".
[[nodiscard]] const char* isa_name(cpu_isa isa) noexcept;

/// Whether this build has the path and this CPU (and OS) can run it. Thread-safe.
[[nodiscard]] bool isa_supported(cpu_isa isa) noexcept;

/// The widest supported path. Thread-safe.
[[nodiscard]] cpu_isa widest_isa() noexcept;

/// The path kernel calls use now: the last set_isa(), else STRATA_CPU_ISA, else widest_isa().
/// Thread-safe; the first call reads the environment variable.
/// \throws std::invalid_argument if STRATA_CPU_ISA is not one of baseline, avx2, avx512 or
///   auto, or names a path isa_supported() denies (every kernel call then throws the same).
[[nodiscard]] cpu_isa active_isa();

/// Makes every later kernel call in the process use `isa` (overriding STRATA_CPU_ISA).
///
/// For tests and benchmarks that compare the paths. Process-wide: a kernel call already
/// running keeps the path it started with, so results stay the same either way.
/// \throws std::invalid_argument if `isa` is not supported.
void set_isa(cpu_isa isa);

}  // namespace strata::kernels::cpu
