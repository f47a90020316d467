#include "merge.hpp"

#include <cstring>
#include <span>
#include <vector>
#include <stdexcept>
#include <type_traits>

#include "strata/kernels/half.hpp"
#include "strata/kernels/ops.hpp"

namespace strata::kvstore::internal {

namespace {

float* floats(const tensor& t) { return t.device_data<float>(); }

/// A 16-bit value's elements from `offset`.
std::uint16_t* halves(const tensor& t, std::size_t offset = 0) {
  return static_cast<std::uint16_t*>(t.raw_data()) + offset;
}

/// One merge on either backend: `math` is kernels::cpu_ops or kernels::cuda_ops.
template <class Math>
void merge_body(const merge_work& w, const Math& math) {
  const dtype type = w.stored.dtype();
  const bool half = kernels::is_half(type);
  float* sum = floats(w.merged) + w.merged_offset;
  if (!w.in_place) {
    // A 16-bit key's values are all of its dtype (widened in the sum), or all float32 (compressed).
    const float* first = w.accumulated.valid() ? floats(w.accumulated) : nullptr;
    std::vector<const float*> inputs;
    std::vector<const std::uint16_t*> half_inputs;
    if (first != nullptr) inputs.push_back(first);
    for (const auto& v : w.values) {
      if (v.t.dtype() == dtype::float32) inputs.push_back(floats(v.t) + v.offset);
      else half_inputs.push_back(halves(v.t, v.offset));
    }
    if (half_inputs.empty()) math.sum(inputs, w.n, sum);
    else if (half_inputs.size() == w.values.size()) math.sum_widened(type, first, half_inputs, w.n, sum);
    else throw std::logic_error("a merge mixes 16-bit and float32 values");
  }
  if (!w.complete) return;
  for (const auto& t : w.opt_state)
    if (w.fresh_state) math.zero(w.n, floats(t));
  const bool optimizer = std::holds_alternative<kernels::sgd_options>(w.rule) ||
                         std::holds_alternative<kernels::adam_options>(w.rule);
  // What the optimizer updates in float32: the value itself, or for a 16-bit key its master copy
  // (multi_precision) or the value widened into a temporary `master`; the 16-bit value is then that
  // rounded.
  float* param = nullptr;
  if (!half) {
    param = floats(w.stored);
  } else if (optimizer) {
    param = floats(w.master);
    if (w.fresh_master) math.widen(type, w.n, halves(w.stored), param);
  }
  std::visit(
      [&](const auto& r) {
        using rule_type = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<rule_type, std::monostate>) {
          // assign: a float32 sum was written into the stored value; a 16-bit one is rounded into it
          if (half) math.narrow(type, w.n, sum, halves(w.stored));
        } else if constexpr (std::is_same_v<rule_type, kvstore::updater>) {
          if constexpr (Math::on_host) {  // cuda stores run it on the actor (run_user_updater)
            tensor stored = w.stored;  // the updater may replace its handle; the data is shared
            r(w.key, w.merged, stored);
          }
        } else if constexpr (std::is_same_v<rule_type, kernels::sgd_options>) {
          math.sgd(w.n, param, sum, w.opt_state.empty() ? nullptr : floats(w.opt_state[0]), r);
        } else {
          math.adam(w.n, param, sum, floats(w.opt_state[0]), floats(w.opt_state[1]), w.step, r);
        }
      },
      w.rule);
  if (half && optimizer) math.narrow(type, w.n, param, halves(w.stored));
}

}  // namespace

std::vector<slice_ref> whole(const std::vector<tensor>& ts) {
  std::vector<slice_ref> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(slice_ref{t, 0});
  return out;
}

void merge_work::run(kernels::cpu_target target) const {
  kernels::with_ops(target, [this](const auto& math) { merge_body(*this, math); });
}

void merge_work::run(kernels::cuda_target target) const {
  kernels::with_ops(target, [this](const auto& math) { merge_body(*this, math); });
}

}  // namespace strata::kvstore::internal
