#include "strata/kernels/isa.hpp"

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/checks.hpp"

namespace strata::kernels::cpu {
namespace {

constexpr cpu_isa all_isas[] = {cpu_isa::baseline, cpu_isa::avx2, cpu_isa::avx512};

// The path set by set_isa(), or -1 until set_isa() or the first active_isa() decides.
std::atomic<int> chosen_isa{-1};

std::string supported_list() {
  std::string s;
  for (const cpu_isa isa : all_isas) {
    if (!isa_supported(isa)) continue;
    if (!s.empty()) s += ", ";
    s += isa_name(isa);
  }
  return s;
}

// STRATA_CPU_ISA, resolved once: the path, or what is wrong with the variable (every kernel
// call then throws it).
struct environment_choice {
  cpu_isa isa = cpu_isa::baseline;
  std::string error;
};

environment_choice read_environment() {
  const char* env = std::getenv("STRATA_CPU_ISA");
  if (env == nullptr || *env == '\0' || std::string_view(env) == "auto") return {widest_isa(), {}};
  for (const cpu_isa isa : all_isas) {
    if (std::string_view(env) != isa_name(isa)) continue;
    if (isa_supported(isa)) return {isa, {}};
    return {cpu_isa::baseline, std::string(env) + " is not supported by this CPU or build (supported: " +
                                   supported_list() + ")"};
  }
  return {cpu_isa::baseline, "\"" + std::string(env) + "\" is not one of baseline, avx2, avx512 or auto"};
}

}  // namespace

const char* isa_name(cpu_isa isa) noexcept {
  switch (isa) {
    case cpu_isa::avx2: return "avx2";
    case cpu_isa::avx512: return "avx512";
    case cpu_isa::baseline: return "baseline";
  }
  return "unknown";
}

bool isa_supported(cpu_isa isa) noexcept {
  switch (isa) {
    case cpu_isa::baseline: return true;
#if defined(__x86_64__) && defined(__GNUC__)
    // The feature sets of the clones' target attributes (kernel_support.hpp); libgcc also
    // checks that the OS saves the ymm/zmm state (XGETBV).
    case cpu_isa::avx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2");
    case cpu_isa::avx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
    case cpu_isa::avx2:
    case cpu_isa::avx512:
      return false;
#endif
  }
  return false;
}

cpu_isa widest_isa() noexcept {
  if (isa_supported(cpu_isa::avx512)) return cpu_isa::avx512;
  if (isa_supported(cpu_isa::avx2)) return cpu_isa::avx2;
  return cpu_isa::baseline;
}

cpu_isa active_isa() {
  const int chosen = chosen_isa.load(std::memory_order_relaxed);
  if (chosen >= 0) return static_cast<cpu_isa>(chosen);
  static const environment_choice env = read_environment();
  if (!env.error.empty()) common::fail("STRATA_CPU_ISA", env.error);
  int expected = -1;  // set_isa() may have decided meanwhile; it wins
  chosen_isa.compare_exchange_strong(expected, static_cast<int>(env.isa), std::memory_order_relaxed);
  return static_cast<cpu_isa>(chosen_isa.load(std::memory_order_relaxed));
}

void set_isa(cpu_isa isa) {
  if (!isa_supported(isa)) {
    common::fail("set_isa", std::string(isa_name(isa)) +
                                " is not supported by this CPU or build (supported: " +
                                supported_list() + ")");
  }
  chosen_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace strata::kernels::cpu
