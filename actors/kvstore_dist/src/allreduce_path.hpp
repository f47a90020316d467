#pragma once
// dist_sync_allreduce: which path a step's sum takes, how the step's keys are packed into one
// buffer, and the checks of the values a cuda replica takes. No GPU needed (tested by
// test_kvstore_dist_allreduce_path in every build); the cuda side is allreduce_cuda.cpp.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/device/all.hpp"
#include "strata/error.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/kvstore_dist/store.hpp"

namespace strata::kvstore_dist::detail {

/// How the sums of an allreduce store cross the ranks.
enum class sum_path : std::uint8_t {
  host_mpi,    // cpu replica: one host buffer, MPI_Iallreduce
  nccl,        // cuda replica: one device buffer, ncclAllReduce
  staged_mpi,  // cuda replica: one device buffer, copied to the host, MPI_Iallreduce, copied back
};
const char* to_string(sum_path p);

/// True when this build has strata::nccl.
bool nccl_built() noexcept;

/// The path for a store of mode `m` whose `replica_device` has kind `replica_kind` (none: not
/// given) and name `replica_name`, with `option`, in a build with (`with_nccl`) or without NCCL.
/// \returns invalid_argument (one sentence) for a replica_device or cuda_sum the mode does not
///   take, a replica device that is neither cpu nor cuda, or cuda_sum::nccl without NCCL.
expected<sum_path> choose_sum_path(mode m, std::optional<device_kind> replica_kind, std::string_view replica_name,
                                   cuda_sum option, bool with_nccl);

/// Where each key of one step goes in the packed buffer.
struct pack_plan {
  std::vector<std::size_t> order;    // positions in the call's keys, in kvstore::key order
  std::vector<std::size_t> offsets;  // offsets[j]: first element of the key order[j]
  std::size_t total = 0;             // elements of the packed buffer
};
/// Keys packed in kvstore::key order (the same on every rank, whatever order each passes them
/// in), each `elements[i]` long. \returns invalid_argument for a key given twice, or sizes that
///   do not match the keys.
expected<pack_plan> plan_packing(const std::vector<kvstore::key>& keys, const std::vector<std::size_t>& elements);

/// Why a rank refuses its values for an allreduce step (what the other ranks are told).
enum class step_refusal : std::uint8_t {
  none,
  unknown_key,  // a key it never initialised
  bad_value,    // a value of the wrong shape, dtype or device (or none)
  bad_keys,     // a key given twice, or keys and values of different counts
};

/// The agreement before each allreduce step's data crosses the ranks (sizes differ when a rank
/// refuses, so the refusal cannot ride on the data's allreduce): one float32 buffer of
/// `step_slot_floats` per rank, each rank filling only its own slot (the rest zeros), summed over
/// the ranks; a slot holds the rank's refusal and a 48-bit print of its keys, in 16-bit pieces
/// (exact in float).
inline constexpr std::size_t step_slot_floats = 4;
/// The print of a step's keys: the same on every rank that passes the same keys, in any order.
std::uint64_t keys_print(const std::vector<kvstore::key>& keys);
/// Fills rank `rank`'s slot of `slots` (world * step_slot_floats floats).
void fill_step_slot(std::vector<float>& slots, int rank, step_refusal reason, std::uint64_t print);
/// The step's verdict on a rank from the summed `slots`, `mine` being its own checks: `mine`
/// when it refused; else invalid_argument naming the ranks that refused and why ("kvstore dist
/// pushpull: rank 1 refused its values for this step (a value of the wrong shape, dtype or
/// device); no replica was updated."), or naming the first rank whose keys differ from rank 0's;
/// else nothing (every rank goes on).
expected<void> step_verdict(const std::vector<float>& slots, const expected<void>& mine);

/// What the checks need to know of one value (tensors of a cuda device cannot be made without a
/// GPU; the checks can).
struct value_facts {
  bool valid = false;
  device_kind kind = device_kind::cpu;
  int gpu = -1;  // the GPU ordinal of a cuda device
  std::string device_name;
  strata::dtype type = strata::dtype::float32;
  std::vector<std::int64_t> shape;
};
value_facts facts_of(const tensor& t);

/// The checks of the values a pushpull gives for `key` to a replica on `replica_name` (GPU
/// `replica_gpu`): at least one, each a float32 tensor of `shape` on that GPU.
/// \returns invalid_argument with one sentence naming the first value that fails.
expected<void> check_cuda_values(const kvstore::key& key, const std::vector<value_facts>& values, int replica_gpu,
                                 const std::string& replica_name, const std::vector<std::int64_t>& shape);

/// Enqueues on `s` (a stream of `dev`, cpu or cuda): a float32 tensor of `plan.total` elements on
/// `dev` whose elements from `plan.offsets[j]` are the sum, in the order given, of
/// `values[plan.order[j]]` (values of one key, each of that key's size, on `dev`). Its ready
/// event marks the end of the packing; nothing blocks the calling thread.
tensor pack_sums(device& dev, stream& s, const pack_plan& plan, const std::vector<std::vector<tensor>>& values);

/// Enqueues on `s`: one tensor per key in key order (shape `shapes[plan.order[j]]`), copied from
/// its place in `packed`.
std::vector<tensor> unpack(device& dev, stream& s, const tensor& packed, const pack_plan& plan,
                           const std::vector<std::vector<std::int64_t>>& shapes);

}  // namespace strata::kvstore_dist::detail
