#pragma once
// Bytes between the ranks of an lm job over rank_group::sum, the one collective the group offers:
// each float of a sum carries a whole number below 2^16, which a sum with zeros keeps exactly.
// Private to strata::lm.

#include <string>
#include <vector>

#include "strata/error.hpp"
#include "strata/lm/ranks.hpp"

namespace strata::lm::detail {

/// Collective: every rank's `bytes`, in rank order, on every rank.
expected<std::vector<std::string>> gather_bytes(rank_group& group, const std::string& bytes);

/// Collective: rank 0's `bytes` on every rank (the others' `bytes` are ignored).
expected<std::string> rank0_bytes(rank_group& group, const std::string& bytes);

}  // namespace strata::lm::detail
