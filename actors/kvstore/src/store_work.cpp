#include "store.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <variant>

#include "crossing.hpp"
#include "strata/device_messages.hpp"
#include "strata/kernels/half.hpp"
#include "strata/kernels/on_stream.hpp"
#if STRATA_HAS_CUDA
#include "strata/kernels/cuda.hpp"
#endif

// The device work of a store: copies, merges and updates, enqueued on the store's stream.
namespace strata::kvstore::internal {

void kvstore_actor::add_key(const kvstore::key& key, const kvstore::key& label, std::vector<std::int64_t> shape,
             const slice_ref& from, const std::shared_ptr<work_status>& status) {
  key_state state;
  state.label = label;
  state.value = tensor::empty(std::move(shape), from.t.dtype(), device_, stream_);
  stream_.wait(from.t.ready_event());
  copy_elements(state.value, 0, from.t, from.offset, static_cast<std::size_t>(state.value.numel()), status,
                {"init: the copy", label});
  keys_.emplace(key, std::move(state));
}


/// Copies `n` elements (of `dst`'s dtype, which is `src`'s) from `src` (from element
/// `src_offset`) to `dst` (from `dst_offset`) on the store's stream: a plain stream copy for whole
/// tensors (on cuda also between GPUs), a work item for slices. A tensor of another device kind
/// (a cuda value of a cpu store, a cpu output of a cuda store) crosses through `copy_across`. A
/// failure of the cuda work item goes to `status`, named by `label`.
void kvstore_actor::copy_elements(const tensor& dst, std::size_t dst_offset, const tensor& src, std::size_t src_offset,
                                  std::size_t n, const std::shared_ptr<work_status>& status,
                                  const work_label& label) {
  if (dst.storage().kind() != device_.kind() || src.storage().kind() != device_.kind()) {
    const bool to_foreign = dst.storage().kind() != device_.kind();
    if ((to_foreign ? src_offset : dst_offset) != 0)
      throw std::logic_error("a copy across device kinds reaches a slice of a store's tensor");
    if (to_foreign) copy_across(dst, dst_offset, src, n, status, label, true);
    else copy_across(src, src_offset, dst, n, status, label, false);
    return;
  }
  const std::size_t element = size_of(dst.dtype());
  if (dst_offset == 0 && src_offset == 0 && dst.bytes() == n * element && src.bytes() == n * element) {
    stream_.copy(dst.storage(), src.storage(), n * element);
    return;
  }
  enqueue_slice_copy(stream_, dst, dst_offset, src, src_offset, n, status, label);
}

/// The stream of `d` that copies between the store's memory and tensors on `d`, made at its first
/// use and kept (a stream whose copy failed keeps that error: it is replaced).
stream kvstore_actor::transfer_stream(const device& d) {
  for (auto& [dev, s] : transfer_streams_)
    if (dev == d) {
      if (s.error()) s = dev.create_stream();
      return s;
    }
  device dev = d;
  stream s = dev.create_stream();
  transfer_streams_.emplace_back(dev, s);
  return s;
}

/// A copy between a tensor of another device kind and a whole tensor of the store, on the streams
/// that `plan_crossing` names (a tensor's stream: `transfer_stream`).
void kvstore_actor::copy_across(const tensor& foreign, std::size_t offset, const tensor& own, std::size_t n,
                                const std::shared_ptr<work_status>& status, const work_label& label, bool to_foreign) {
  const bool whole = offset == 0 && foreign.bytes() == n * size_of(foreign.dtype());
  const crossing_plan plan = plan_crossing(device_.kind(), foreign.storage().kind(), whole);
  stream other = plan.bounce || plan.whole_copy == copier::tensor_stream ? transfer_stream(foreign.get_device()) : stream{};
  enqueue_crossing(plan, stream_, other, {foreign, offset}, own, n, to_foreign, status, label);
}

tensor kvstore_actor::converted(const tensor& t, dtype type, const std::shared_ptr<work_status>& status,
                                const work_label& label) {
  tensor out = tensor::empty(t.shape(), type, device_, stream_);
  const auto n = static_cast<std::size_t>(t.numel());
  kernels::on_stream(stream_,
                     {.name = "kvstore_convert", .kind = work_kind::pointwise, .bytes = 6.0 * static_cast<double>(n)},
                     [t, out, n, status, label](auto target) {
                       run_guarded(*status, label, [&] {
                         if constexpr (kernels::is_cuda_target<decltype(target)>) {
                           const auto format = kernels::cuda_half_format(kernels::is_half(out.dtype()) ? out.dtype() : t.dtype());
                           if (kernels::is_half(out.dtype()))
                             kernels::cuda::narrow(target.context, format, n, t.device_data<float>(),
                                                   static_cast<std::uint16_t*>(out.raw_data()));
                           else
                             kernels::cuda::widen(target.context, format, n,
                                                  static_cast<const std::uint16_t*>(t.raw_data()), out.device_data<float>());
                         } else if (kernels::is_half(out.dtype()))
                           kernels::cpu::narrow(out.dtype(), n, t.device_data<float>(),
                                                static_cast<std::uint16_t*>(out.raw_data()));
                         else
                           kernels::cpu::widen(t.dtype(), n, static_cast<const std::uint16_t*>(t.raw_data()),
                                               out.device_data<float>());
                       });
                     });
  return out;
}

/// cuda stores: work items only enqueue, so the tensors they capture may be dropped before the
/// GPU reads them; a tensor the store did not allocate on its own stream is freed only after
/// the store's stream has passed this point. cpu and sim items hold their tensors while they run.
void kvstore_actor::keep_until_done(const tensor& t) const {
  if (device_.kind() == device_kind::cuda) t.storage().record_stream(stream_);
}

/// A pushed value as the merge reads it. A value on another GPU than a cuda store's, or on another
/// device kind than the store's (a cuda value of a cpu store: `copy_across`), is first copied into
/// a staging tensor on the merge device (freed in stream order after the merge); the others are
/// read where they are.
slice_ref kvstore_actor::readable(const slice_ref& v, const key_state& state, const std::shared_ptr<work_status>& status) {
  if (device_.can_read_in_place(v.t.storage())) {
    keep_until_done(v.t);
    return v;
  }
  const auto n = static_cast<std::size_t>(state.value.numel());
  const bool whole_value = v.offset == 0 && static_cast<std::size_t>(v.t.numel()) == n;
  tensor staging = tensor::empty(whole_value ? v.t.shape() : std::vector<std::int64_t>{state.value.numel()},
                                 v.t.dtype(), device_, stream_);
  copy_elements(staging, 0, v.t, v.offset, n, status, {"push: the copy of a value", state.label});
  return slice_ref{staging, 0};
}

slice_ref kvstore_actor::compressed(const slice_ref& v, key_state& state, std::size_t slot,
                                   const std::shared_ptr<work_status>& status) {
  const auto n = static_cast<std::size_t>(state.value.numel());
  const bool fresh = state.residuals.size() <= slot;
  while (state.residuals.size() <= slot)
    state.residuals.push_back(tensor::empty({state.value.numel()}, dtype::float32, device_, stream_));
  tensor residual = state.residuals[slot];
  tensor sent = tensor::empty({state.value.numel()}, dtype::float32, device_, stream_);
  kernels::on_stream(stream_,
                     {.name = "kvstore_compress", .kind = work_kind::pointwise, .bytes = 4.0 * sizeof(float) * static_cast<double>(n)},
                     [v, residual, sent, n, fresh, type = compression_, threshold = compression_threshold_,
                      status, label = work_label{"push: the compression", state.label}](auto target) {
                       if constexpr (kernels::is_cuda_target<decltype(target)>) {
                         // `compressed` runs only while compression is on
                         using kernels::cuda::gradient_quantizer;
                         const auto quantizer =
                             type == compression_type::two_bit ? gradient_quantizer::two_bit : gradient_quantizer::one_bit;
                         run_guarded(*status, label, [&] {
                           const float* in = sent.device_data<float>();
                           if (v.t.dtype() == dtype::float32)
                             in = v.t.device_data<float>() + v.offset;
                           else  // a 16-bit value: widened into `sent`, then quantized in place
                             kernels::cuda::widen(target.context, kernels::cuda_half_format(v.t.dtype()), n,
                                                  static_cast<const std::uint16_t*>(v.t.raw_data()) + v.offset,
                                                  sent.device_data<float>());
                           kernels::cuda::compress_gradient(target.context, n, quantizer, threshold, in,
                                                            residual.device_data<float>(), sent.device_data<float>(), fresh);
                         });
                       } else {
                         float* r = residual.device_data<float>();
                         if (fresh) std::fill(r, r + n, 0.0f);
                         std::vector<float> widened;  // a 16-bit key's value is compressed in float32
                         const float* in = nullptr;
                         if (v.t.dtype() == dtype::float32) {
                           in = v.t.device_data<float>() + v.offset;
                         } else {
                           widened.resize(n);
                           kernels::cpu::widen(v.t.dtype(), n, static_cast<const std::uint16_t*>(v.t.raw_data()) + v.offset,
                                               widened.data());
                           in = widened.data();
                         }
                         compress(type, threshold, in, r, sent.device_data<float>(), n);
                       }
                     });
  return slice_ref{sent, 0};
}

/// Groups the values by key (first-appearance order) and merges each group.
void kvstore_actor::enqueue_push(const std::vector<kvstore::key>& keys, const std::vector<slice_ref>& values,
                  const std::shared_ptr<work_status>& status) {
  auto groups = group_by_key(keys, values);
  for (auto& [key, group] : groups) {
    key_state& state = keys_.at(key);
    for (const auto& v : group) stream_.wait(v.t.ready_event());
    for (auto& v : group) v = readable(v, state, status);
    if (compression_ != compression_type::none)
      for (std::size_t slot = 0; slot < group.size(); ++slot) group[slot] = compressed(group[slot], state, slot, status);
    const std::size_t need = options_.contributions_per_version;
    if (need == 0) {  // asynchronous: this call's values make one update
      merge(state, group, false, true, status);
      continue;
    }
    std::size_t next = 0;
    while (next < group.size()) {  // synchronous: fill the current version, maybe the next ones
      std::size_t take = std::min(need - state.received, group.size() - next);
      std::vector<slice_ref> part(group.begin() + static_cast<std::ptrdiff_t>(next),
                                  group.begin() + static_cast<std::ptrdiff_t>(next + take));
      bool first = state.received == 0;
      state.received += take;
      bool complete = state.received == need;
      merge(state, part, !first, complete, status);
      if (complete) state.received = 0;
      next += take;
    }
  }
}

tensor& kvstore_actor::accumulator_of(key_state& state) {
  if (!state.accumulator.valid())
    state.accumulator = tensor::empty(state.value.shape(), dtype::float32, device_, stream_);
  return state.accumulator;
}

/// Sums `values` (plus the accumulator when `with_accumulator`) and, when `complete`, applies
/// the update rule and counts a version.
void kvstore_actor::merge(key_state& state, const std::vector<slice_ref>& values, bool with_accumulator, bool complete,
           const std::shared_ptr<work_status>& status) {
  const auto n = static_cast<std::size_t>(state.value.numel());
  update_rule rule = complete ? rule_ : update_rule{};
  const bool assign = complete && std::holds_alternative<std::monostate>(rule);
  const bool user = std::holds_alternative<kvstore::updater>(rule);
  const bool half = kernels::is_half(state.value.dtype());  // summed in float32, then rounded
  // Where the sum goes. Assign (the default rule) sums straight into the stored value: k reads
  // and one write, nothing more. One value read in place when no sum is needed (a user updater
  // gets it as a tensor, so only a whole one). Otherwise the key's accumulator.
  tensor merged;
  std::size_t merged_offset = 0;
  bool in_place = false;
  if (assign && !half) {
    merged = state.value;
  } else if (!half && !with_accumulator && values.size() == 1 && complete &&
             (!user || (values[0].offset == 0 && static_cast<std::size_t>(values[0].t.numel()) == n))) {
    merged = values[0].t;
    merged_offset = values[0].offset;
    in_place = true;
  } else {
    merged = accumulator_of(state);
  }
  merge_work work{.key = state.label,
                  .values = values,
                  .accumulated = with_accumulator ? accumulator_of(state) : tensor{},
                  .merged = merged,
                  .merged_offset = merged_offset,
                  .in_place = in_place,
                  .complete = complete,
                  .stored = state.value,
                  .rule = rule,
                  .n = n};
  if (complete) {
    if (std::holds_alternative<kernels::sgd_options>(rule) &&
        std::get<kernels::sgd_options>(rule).momentum != 0.0 && state.optimizer_state.empty()) {
      state.optimizer_state = {tensor::empty(state.value.shape(), dtype::float32, device_, stream_)};
      work.fresh_state = true;
    }
    if (std::holds_alternative<kernels::adam_options>(rule) && state.optimizer_state.size() != 2) {
      state.optimizer_state = {tensor::empty(state.value.shape(), dtype::float32, device_, stream_),
                               tensor::empty(state.value.shape(), dtype::float32, device_, stream_)};
      state.step = 0;
      work.fresh_state = true;
    }
    if (std::holds_alternative<kernels::adam_options>(rule)) work.step = ++state.step;
    work.opt_state = state.optimizer_state;
    const bool optimizer =
        std::holds_alternative<kernels::sgd_options>(rule) || std::holds_alternative<kernels::adam_options>(rule);
    if (half && optimizer && multi_precision_) {
      if (!state.master.valid()) {
        state.master = tensor::empty(state.value.shape(), dtype::float32, device_, stream_);
        work.fresh_master = true;
      }
      work.master = state.master;
    } else if (half && optimizer) {  // the value widened for this step only (freed in stream order)
      work.master = tensor::empty(state.value.shape(), dtype::float32, device_, stream_);
      work.fresh_master = true;
    }
    ++state.version;
    if (!std::holds_alternative<std::monostate>(scheduler_)) {  // MXNet's lr_scheduler, per update
      const double lr = learning_rate(scheduler_, static_cast<std::int64_t>(state.version) + state.schedule_shift);
      if (auto* sgd = std::get_if<kernels::sgd_options>(&work.rule)) sgd->lr = lr;
      if (auto* adam = std::get_if<kernels::adam_options>(&work.rule)) adam->lr = lr;
    }
  }
  const double k = static_cast<double>(values.size() + (with_accumulator ? 1 : 0));
  const work_label label{"push: the update", state.label};
  kernels::on_stream(stream_,
                     {.name = complete ? "kvstore_update" : "kvstore_accumulate",
                      .kind = work_kind::pointwise,
                      .flops = (k + 4.0) * static_cast<double>(n),
                      .bytes = (assign ? k + 1.0 : k + 4.0) * 4.0 * static_cast<double>(n)},
                     [work, label, status](auto target) {
                       if (status->failed()) return;  // an earlier part of this request failed
                       run_guarded(*status, label, [&] { work.run(target); });
                     });
  if (user && complete && device_.kind() == device_kind::cuda) run_user_updater(work, *status);
}

/// cuda stores: a user updater is host code that must launch its own device work, so the store
/// calls it here, on the actor's thread, right after enqueueing the sum, with `merged` and
/// `stored` carrying the sum's event as their ready event. The updater may set `stored`'s ready
/// event to the end of its own work; the store's stream waits for it before anything later.
void kvstore_actor::run_user_updater(const merge_work& work, work_status& status, const char* action) {
  event summed = stream_.record();
  tensor merged = work.merged;
  tensor stored = work.stored;
  merged.set_ready_event(summed);
  stored.set_ready_event(summed);
  if (!status.failed())
    run_guarded(status, {action, work.key},
                [&] { std::get<kvstore::updater>(work.rule)(work.key, merged, stored); });
  stream_.wait(stored.ready_event());
}

/// Copies each key's value into its output; returns the event that marks the copies done.
event kvstore_actor::enqueue_pull(const std::vector<kvstore::key>& keys, const std::vector<slice_ref>& outs,
                   const std::shared_ptr<work_status>& status) {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    stream_.wait(outs[i].t.ready_event());  // whatever the caller queued on the output comes first
    const key_state& state = keys_.at(keys[i]);
    copy_elements(outs[i].t, outs[i].offset, state.value, 0, static_cast<std::size_t>(state.value.numel()), status,
                  {"pull: the copy", state.label});
  }
  return stream_.record();
}

namespace {
/// Answers `promise` with `value` once the work enqueued on `s` so far has completed, or with
/// the failure of the stream or of the request's work items.
template <class T>
void deliver_when_done(stream& s, response_promise<T> promise, T value, std::shared_ptr<work_status> status) {
  s.on_complete([promise, value = std::move(value), status](std::exception_ptr e) mutable {
    if (e) promise.deliver(error(errc::runtime_failure, "kvstore: device work failed: " + device_failure_text(e)));
    else if (status && status->failed()) promise.deliver(error(errc::runtime_failure, status->failure()));
    else promise.deliver(std::move(value));
  });
}
}  // namespace

void kvstore_actor::reply_when_done(response_promise<unit_t> promise, std::shared_ptr<work_status> status) {
  deliver_when_done(stream_, std::move(promise), unit, std::move(status));
}
void kvstore_actor::reply_when_done(response_promise<std::vector<tensor>> promise, std::vector<tensor> outs,
                                    std::shared_ptr<work_status> status) {
  deliver_when_done(stream_, std::move(promise), std::move(outs), std::move(status));
}
void kvstore_actor::reply_when_done(response_promise<std::vector<std::uint64_t>> promise,
                                    std::vector<std::uint64_t> versions, std::shared_ptr<work_status> status) {
  deliver_when_done(stream_, std::move(promise), std::move(versions), std::move(status));
}

}  // namespace strata::kvstore::internal
