#include "allreduce_path.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "strata/checksum.hpp"
#include "strata/device/shape.hpp"
#include "strata/kernels/elementwise.hpp"
#include "strata/kernels/on_stream.hpp"

namespace strata::kvstore_dist::detail {

const char* to_string(sum_path p) {
  switch (p) {
    case sum_path::host_mpi: return "host_mpi";
    case sum_path::nccl: return "nccl";
    case sum_path::staged_mpi: return "staged_mpi";
  }
  return "host_mpi";
}

bool nccl_built() noexcept {
#if STRATA_HAS_NCCL
  return true;
#else
  return false;
#endif
}

expected<sum_path> choose_sum_path(mode m, std::optional<device_kind> replica_kind, std::string_view replica_name,
                                   cuda_sum option, bool with_nccl) {
  const std::string where = "kvstore_dist::store: ";
  const bool cuda = replica_kind && *replica_kind == device_kind::cuda;
  if (m != mode::allreduce && replica_kind)
    return error(errc::invalid_argument, where + "replica_device is " + std::string(replica_name) +
                                             ", but only dist_sync_allreduce keeps replicas (dist_sync and "
                                             "dist_async keep values on their server shards).");
  if (option != cuda_sum::automatic && !cuda)
    return error(errc::invalid_argument, where + "cuda_sum is set, but it only applies to dist_sync_allreduce "
                                                 "with a cuda replica_device.");
  if (!replica_kind || *replica_kind == device_kind::cpu) return sum_path::host_mpi;
  if (!cuda)
    return error(errc::invalid_argument, where + "replica_device is " + std::string(replica_name) +
                                             "; expected a cpu or cuda device.");
  if (option == cuda_sum::staged_mpi) return sum_path::staged_mpi;
  if (with_nccl) return sum_path::nccl;
  if (option == cuda_sum::nccl)
    return error(errc::invalid_argument, where + "cuda_sum is nccl, but this build has no strata::nccl "
                                                 "(STRATA_NCCL=OFF, or NCCL not found); use staged_mpi or automatic.");
  return sum_path::staged_mpi;
}

expected<pack_plan> plan_packing(const std::vector<kvstore::key>& keys, const std::vector<std::size_t>& elements) {
  if (keys.size() != elements.size())
    return error(errc::invalid_argument, "kvstore dist pushpull: " + std::to_string(keys.size()) + " keys but " +
                                             std::to_string(elements.size()) + " sizes.");
  pack_plan plan;
  plan.order.resize(keys.size());
  std::iota(plan.order.begin(), plan.order.end(), std::size_t{0});
  std::sort(plan.order.begin(), plan.order.end(), [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  for (std::size_t j = 0; j < plan.order.size(); ++j) {
    if (j > 0 && keys[plan.order[j]] == keys[plan.order[j - 1]])
      return error(errc::invalid_argument, "kvstore dist pushpull: key " + keys[plan.order[j]].to_string() +
                                               " appears twice; dist_sync_allreduce takes each key once per call.");
    plan.offsets.push_back(plan.total);
    plan.total += elements[plan.order[j]];
  }
  return plan;
}

std::uint64_t keys_print(const std::vector<kvstore::key>& keys) {
  std::vector<kvstore::key> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  std::uint64_t h = fnv1a64_offset_basis;
  for (const auto& k : sorted) {
    const std::string text = (k.is_int() ? "i:" : "s:") + k.to_string();
    h = fnv1a64(std::string_view(text.c_str(), text.size() + 1), h);  // the NUL ends each key
  }
  return h;
}

void fill_step_slot(std::vector<float>& slots, int rank, step_refusal reason, std::uint64_t print) {
  float* slot = slots.data() + static_cast<std::size_t>(rank) * step_slot_floats;
  slot[0] = static_cast<float>(reason);
  for (std::size_t i = 1; i < step_slot_floats; ++i) slot[i] = static_cast<float>((print >> (16 * (i - 1))) & 0xffffu);
}

namespace {

const char* why_refused(float reason) {
  switch (static_cast<step_refusal>(static_cast<int>(reason))) {
    case step_refusal::unknown_key: return "a key it never initialised";
    case step_refusal::bad_value: return "a value of the wrong shape, dtype or device";
    case step_refusal::bad_keys: return "a key given twice, or keys and values of different counts";
    case step_refusal::none: break;
  }
  return "a reason this rank does not know";
}

}  // namespace

expected<void> step_verdict(const std::vector<float>& slots, const expected<void>& mine) {
  if (!mine) return mine;
  const std::size_t ranks = slots.size() / step_slot_floats;
  std::string who, why;  // "1, 2" and "rank 1: ...; rank 2: ..."
  std::size_t count = 0;
  for (std::size_t r = 0; r < ranks; ++r) {
    const float reason = slots[r * step_slot_floats];
    if (reason == 0.0f) continue;
    const std::string sep = count == 0 ? "" : ", ";
    who += sep + std::to_string(r);
    why += (count == 0 ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + why_refused(reason);
    ++count;
  }
  if (count == 1)
    return error(errc::invalid_argument, "kvstore dist pushpull: rank " + who + " refused its values for this step (" +
                                             why.substr(why.find(": ") + 2) + "); no replica was updated.");
  if (count > 1)
    return error(errc::invalid_argument, "kvstore dist pushpull: ranks " + who + " refused their values for this step (" +
                                             why + "); no replica was updated.");
  for (std::size_t r = 1; r < ranks; ++r)
    if (!std::equal(slots.begin() + static_cast<std::ptrdiff_t>(r * step_slot_floats + 1),
                    slots.begin() + static_cast<std::ptrdiff_t>((r + 1) * step_slot_floats), slots.begin() + 1))
      return error(errc::invalid_argument, "kvstore dist pushpull: rank " + std::to_string(r) +
                                               " passed other keys than rank 0 to this step (every rank passes the "
                                               "same keys); no replica was updated.");
  return {};
}

value_facts facts_of(const tensor& t) {
  value_facts f;
  f.valid = t.valid();
  if (!f.valid) return f;
  const device d = t.get_device();
  f.kind = d.kind();
  f.gpu = d.kind() == device_kind::cuda ? d.properties().gpu_ordinal : -1;
  f.device_name = d.name();
  f.type = t.dtype();
  f.shape = t.shape();
  return f;
}

expected<void> check_cuda_values(const kvstore::key& key, const std::vector<value_facts>& values, int replica_gpu,
                                 const std::string& replica_name, const std::vector<std::int64_t>& shape) {
  const std::string head = "kvstore dist pushpull: ";
  if (values.empty()) return error(errc::invalid_argument, head + "no values for key " + key.to_string() + ".");
  for (std::size_t i = 0; i < values.size(); ++i) {
    const value_facts& v = values[i];
    const std::string which = head + "value " + std::to_string(i) + " for key " + key.to_string();
    if (!v.valid) return error(errc::invalid_argument, which + " is no tensor.");
    if (v.kind != device_kind::cuda || v.gpu != replica_gpu)
      return error(errc::invalid_argument, which + " is on " + v.device_name +
                                               "; this dist_sync_allreduce store keeps its replica on " + replica_name +
                                               " and takes float32 tensors on that GPU.");
    if (v.type != strata::dtype::float32 || v.shape != shape)
      return error(errc::invalid_argument, which + " is " + std::string(to_string(v.type)) + " " + shape_text(v.shape) +
                                               ", expected float32 " + shape_text(shape) + ".");
  }
  return {};
}

tensor pack_sums(device& dev, stream& s, const pack_plan& plan, const std::vector<std::vector<tensor>>& values) {
  tensor packed = tensor::empty({static_cast<std::int64_t>(plan.total)}, strata::dtype::float32, dev, s);
  std::vector<tensor> inputs;  // kept by the work item until it has run
  std::vector<std::size_t> firsts, sizes;
  for (std::size_t j = 0; j < plan.order.size(); ++j) {
    const auto& of_key = values[plan.order[j]];
    firsts.push_back(inputs.size());
    sizes.push_back(static_cast<std::size_t>(of_key.front().numel()));
    for (const auto& v : of_key) {
      s.wait(v.ready_event());
      v.storage().record_stream(s);  // released after the sum, whichever stream made it
      inputs.push_back(v);
    }
  }
  firsts.push_back(inputs.size());
  const double elements = static_cast<double>(inputs.empty() ? 0 : plan.total);
  kernels::on_stream(s, {.name = "kvstore_dist_pack", .kind = work_kind::pointwise, .flops = elements, .bytes = 8.0 * elements},
                     [packed, inputs, firsts, sizes, offsets = plan.offsets](auto target) {
                       for (std::size_t j = 0; j < sizes.size(); ++j) {
                         std::vector<const float*> in;
                         for (std::size_t i = firsts[j]; i < firsts[j + 1]; ++i) in.push_back(inputs[i].device_data<float>());
                         float* out = packed.device_data<float>() + offsets[j];
                         if constexpr (kernels::is_cuda_target<decltype(target)>)
                           kernels::cuda::sum_arrays(target.context, in, sizes[j], out);
                         else
                           kernels::cpu::sum_arrays(in, sizes[j], out);
                       }
                     });
  packed.set_ready_event(s.record());
  return packed;
}

std::vector<tensor> unpack(device& dev, stream& s, const tensor& packed, const pack_plan& plan,
                           const std::vector<std::vector<std::int64_t>>& shapes) {
  std::vector<tensor> outs;
  for (std::size_t j = 0; j < plan.order.size(); ++j)
    outs.push_back(tensor::empty(shapes[plan.order[j]], strata::dtype::float32, dev, s));
  s.wait(packed.ready_event());
  packed.storage().record_stream(s);
  const double bytes = 8.0 * static_cast<double>(plan.total);
  kernels::on_stream(s, {.name = "kvstore_dist_unpack", .kind = work_kind::copy, .bytes = bytes},
                     [packed, outs, offsets = plan.offsets](auto target) {
                       for (std::size_t j = 0; j < outs.size(); ++j) {
                         const auto n = static_cast<std::size_t>(outs[j].numel());
                         const float* from = packed.device_data<float>() + offsets[j];
                         if constexpr (kernels::is_cuda_target<decltype(target)>)
                           kernels::cuda::copy(target.context, n, from, outs[j].device_data<float>());
                         else if (n > 0)
                           std::memcpy(outs[j].device_data<float>(), from, n * sizeof(float));
                       }
                     });
  const event done = s.record();
  for (auto& t : outs) t.set_ready_event(done);
  return outs;
}

}  // namespace strata::kvstore_dist::detail
