#pragma once
// CAF 0.17 twins of samples/savina's workloads (savina_caf.cpp; built only with libcaf-dev).

#include "savina.hpp"

namespace strata::bench {
savina::result caf_counting(const savina::params& p);
savina::result caf_fork_join(const savina::params& p);
savina::result caf_thread_ring(const savina::params& p);
savina::result caf_chameneos(const savina::params& p);
savina::result caf_big(const savina::params& p);
}  // namespace strata::bench
