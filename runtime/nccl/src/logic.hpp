#pragma once
// Private: the parts of strata::nccl that need no GPU (tested by test_nccl_host in every CUDA
// build): the unique-id exchange packing, error sentences, and the checks of collective inputs.

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/device/device.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"
#include "strata/error.hpp"

namespace strata::nccl::detail {

inline constexpr std::size_t unique_id_bytes = 128;  // NCCL_UNIQUE_ID_BYTES
using unique_id = std::array<std::byte, unique_id_bytes>;

/// What one rank contributes to the id exchange, a float sum over all ranks: [1 if this rank can
/// take part else 0, then the id's bytes (0..255 each) on rank 0, zeros elsewhere]. Sums of
/// small integers are exact in float32, so the sum is [ranks ready, rank 0's id].
std::vector<float> pack_id_exchange(bool ready, const unique_id* id);
/// Reads the summed exchange of `world_size` ranks.
/// \returns runtime_failure when fewer than `world_size` ranks were ready, or when a value is no
///   byte (ranks called create in different orders, or two ranks think they are rank 0).
expected<unique_id> unpack_id_exchange(std::span<const float> summed, int world_size);

/// "<call> failed: <NCCL's text>[ (<NCCL's last error>)]".
std::string failure_text(std::string_view call, std::string_view result_text, std::string_view last_error = {});

/// The checks allreduce_sum makes before it enqueues anything: every tensor valid, float32 and
/// on a cuda device with `gpu_ordinal`; `s` a stream of a cuda device on that GPU.
expected<void> check_allreduce_inputs(const std::vector<tensor>& tensors, int gpu_ordinal, const stream& s);

/// The check of a device a communicator is made on.
expected<void> check_device(const device& d);

}  // namespace strata::nccl::detail
