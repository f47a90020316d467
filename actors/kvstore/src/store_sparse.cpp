#include "store.hpp"

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "strata/kernels/half.hpp"
#include "strata/kernels/on_stream.hpp"

// Row-sparse values in a store or a shard (docs/kvstore.md, "Row-sparse values"): pushes of rows
// by id, asynchronous or collected into synchronous versions, and pulls of rows by id, on the
// store's stream. A request's rows arrive as pieces of the stored value (sparse_rows.hpp).
namespace strata::kvstore::internal {

namespace {
// Row-sparse loops touch rows spread over a big key, each a cache (and often TLB) miss: they ask
// for the row `rows_ahead` places on while they work on this one. At most 4 KiB of a row.
constexpr std::size_t rows_ahead = 8;
template <int rw>  // 0: the row will be read, 1: written
void prefetch(const void* row, std::size_t bytes) noexcept {
  const auto* p = static_cast<const char*>(row);
  for (std::size_t b = 0; b < std::min<std::size_t>(bytes, 4096); b += 64) __builtin_prefetch(p + b, rw);
}

/// The pieces of each key's rows: `tensors[i]` holds the rows `ids[i]` of the whole key `keys[i]`.
template <class Ids>
std::vector<row_pieces> whole_key_pieces(const std::vector<kvstore::key>& keys, const Ids& ids_of,
                                                     const std::vector<tensor>& tensors, const shape_lookup& shape_of) {
  std::vector<row_pieces> out;
  out.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto& shape = *shape_of(keys[i]).shape;
    const std::size_t cols = row_length(shape);
    out.push_back(pieces_within(tensors[i], ids_of(i), cols, 0, static_cast<std::size_t>(shape[0]) * cols));
  }
  return out;
}

}  // namespace

expected<void> kvstore_actor::check_round_kind(const char* op, const std::vector<kvstore::key>& keys, bool sparse) const {
  if (options_.contributions_per_version == 0) return {};
  for (const auto& key : keys) {
    const key_state& state = keys_.at(key);
    if (state.received > 0 && state.sparse_round != sparse)
      return mixed_round(op, state.label, sparse);
  }
  return {};
}

expected<void> kvstore_actor::on_push_row_sparse(kvstore::push_row_sparse& m, response_promise<unit_t>& p) {
  if (auto r = row_sparse_supported("push", place_, compression_ != compression_type::none); !r) return r;
  if (auto r = check_row_sparse_push(m, shape_of(), place_, int_keys_); !r) return r;
  if (auto r = check_round_kind("push", m.keys, true); !r) return r;
  std::vector<tensor> rows;
  for (const auto& v : m.values) rows.push_back(v.rows);
  const auto values = whole_key_pieces(m.keys, [&](std::size_t i) -> const auto& { return m.values[i].row_ids; }, rows,
                                       shape_of());
  auto status = std::make_shared<work_status>();
  enqueue_row_sparse_push(m.keys, values, status);
  reply_when_done(p, status);
  serve_parked();
  return {};
}

expected<void> kvstore_actor::on_row_sparse_pull(kvstore::row_sparse_pull& m, response_promise<std::vector<tensor>>& p) {
  if (auto r = check_row_sparse_pull(m, shape_of(), place_, int_keys_); !r) return r;
  auto pieces = whole_key_pieces(m.keys, [&](std::size_t i) -> const auto& { return m.row_ids[i]; }, m.outs, shape_of());
  auto serve = [this, keys = m.keys, pieces = std::move(pieces), outs = m.outs, p](const error* stopped) mutable {
    if (stopped) return p.deliver(*stopped);
    auto status = std::make_shared<work_status>();
    const event done = enqueue_row_pull(keys, pieces, status);
    for (auto& out : outs) out.set_ready_event(done);
    reply_when_done(p, std::move(outs), status);
  };
  std::vector<std::uint64_t> versions(m.keys.size(), m.min_version);
  if (!version_reached(m.keys, versions)) parked_.push_back(parked_pull{m.keys, std::move(versions), std::move(serve)});
  else serve(nullptr);
  return {};
}

/// The router checked the request against the caller's keys and cut its rows into the pieces of
/// this shard's chunk keys.
expected<void> kvstore_actor::on_shard_row_sparse(shard_row_sparse& m, response_promise<std::vector<std::uint64_t>>& p) {
  if (auto r = still_held(m.push_keys, m.pull_keys); !r) return r;
  if (m.push_keys.size() != m.values.size() || m.pull_keys.size() != m.outs.size() ||
      (!m.push_keys.empty() && !m.pull_keys.empty()))
    return bad("kvstore shard request: a row-sparse request needs one piece list per key, and a push or a pull, "
               "not both.");
  if (!m.push_keys.empty()) {
    if (auto r = row_sparse_supported("push", place_, compression_ != compression_type::none); !r) return r;
    if (auto r = check_round_kind("push", m.push_keys, true); !r) return r;
    auto status = std::make_shared<work_status>();
    enqueue_row_sparse_push(m.push_keys, m.values, status);
    std::vector<std::uint64_t> rounds;
    for (const auto& key : m.push_keys) rounds.push_back(round_of(key));
    reply_when_done(p, std::move(rounds), status);
    serve_parked();
    return {};
  }
  auto serve = [this, keys = m.pull_keys, pieces = std::move(m.outs), p](const error* stopped) mutable {
    if (stopped) return p.deliver(*stopped);
    auto status = std::make_shared<work_status>();
    (void)enqueue_row_pull(keys, pieces, status);
    reply_when_done(p, std::vector<std::uint64_t>{}, status);
  };
  std::vector<std::uint64_t> versions(m.pull_keys.size(), m.min_version);
  if (!version_reached(m.pull_keys, versions))
    parked_.push_back(parked_pull{m.pull_keys, std::move(versions), std::move(serve)});
  else serve(nullptr);
  return {};
}

void kvstore_actor::enqueue_row_sparse_push(const std::vector<kvstore::key>& keys,
                                            const std::vector<row_pieces>& values,
                                            const std::shared_ptr<work_status>& status) {
  const std::size_t need = options_.contributions_per_version;
  for (auto& [key, group] : group_by_key(keys, values)) {
    key_state& state = keys_.at(key);
    for (const auto& list : group) stream_.wait(list.data.ready_event());
    if (device_.kind() == device_kind::cuda)  // the rows (cpu tensors, checked) are read on the device
      for (auto& list : group) list = rows_on_store(list, status, {"push: the copy of the rows", state.label});
    if (need == 0) {  // asynchronous: this call's values make one update
      update_rows(state, std::move(group), status);
      continue;
    }
    // Synchronous: each value is a contribution. Pieces of a version this call completes are read
    // in place by its update; those left waiting for later contributions are copied, since the
    // caller may reuse its tensors once the push is answered.
    std::vector<row_pieces> fresh;
    for (auto& list : group) {
      state.sparse_round = true;
      fresh.push_back(std::move(list));
      if (++state.received < need) continue;
      std::vector<row_pieces> all = std::move(state.sparse_received);
      all.insert(all.end(), std::make_move_iterator(fresh.begin()), std::make_move_iterator(fresh.end()));
      update_rows(state, std::move(all), status);
      fresh.clear();
      state.sparse_received.clear();
      state.received = 0;
      state.sparse_round = false;
    }
    if (fresh.empty()) continue;
    if (device_.kind() == device_kind::cuda)  // already copies of the store's own
      state.sparse_received.insert(state.sparse_received.end(), std::make_move_iterator(fresh.begin()),
                                   std::make_move_iterator(fresh.end()));
    else
      state.sparse_received.push_back(kept_copy(fresh, state.value.dtype()));
  }
}

row_pieces kvstore_actor::kept_copy(const std::vector<row_pieces>& lists, dtype type) {
  row_pieces kept;
  std::size_t total = 0;
  for (const auto& list : lists)
    for (const auto& p : list.pieces) {
      kept.pieces.push_back({p.id, p.offset, p.length, total});
      total += p.length;
    }
  const std::size_t size = size_of(type);  // the key's dtype, which every list has (checked)
  kept.data = tensor::empty({static_cast<std::int64_t>(total)}, type, device_, stream_);
  kernels::on_stream(stream_,
                     {.name = "kvstore_row_sparse_keep", .kind = work_kind::copy,
                      .bytes = 2.0 * static_cast<double>(size * total)},
                     [lists, copy = kept.data, size](auto target) {
                       if constexpr (!kernels::is_cuda_target<decltype(target)>) {  // cpu stores only
                         auto* to = static_cast<std::byte*>(copy.raw_data());
                         for (const auto& list : lists) {
                           if (list.pieces.empty()) continue;
                           const auto* from = static_cast<const std::byte*>(list.data.raw_data());
                           for (const auto& p : list.pieces) {
                             std::memcpy(to, from + p.at * size, p.length * size);
                             to += p.length * size;
                           }
                         }
                       }
                     });
  return kept;
}

void kvstore_actor::update_rows(key_state& state, std::vector<row_pieces> lists, const std::shared_ptr<work_status>& status) {
  update_rule rule = rule_;
  bool fresh = false;
  if (const auto* sgd = std::get_if<kernels::sgd_options>(&rule); sgd && sgd->momentum != 0.0 && state.optimizer_state.empty()) {
    state.optimizer_state = {tensor::empty(state.value.shape(), dtype::float32, device_, stream_)};
    fresh = true;
  }
  if (std::holds_alternative<kernels::adam_options>(rule) && state.optimizer_state.size() != 2) {
    state.optimizer_state = {tensor::empty(state.value.shape(), dtype::float32, device_, stream_),
                             tensor::empty(state.value.shape(), dtype::float32, device_, stream_)};
    state.step = 0;
    fresh = true;
  }
  const std::int64_t step = std::holds_alternative<kernels::adam_options>(rule) ? ++state.step : 0;
  // A 16-bit key under multi_precision: its float32 master copy, made from the whole value at its
  // first update as a dense update makes it; the rule then runs on the master's rows.
  const dtype type = state.value.dtype();
  const bool optimizer =
      std::holds_alternative<kernels::sgd_options>(rule) || std::holds_alternative<kernels::adam_options>(rule);
  bool fresh_master = false;
  if (kernels::is_half(type) && optimizer && multi_precision_ && !state.master.valid()) {
    state.master = tensor::empty(state.value.shape(), dtype::float32, device_, stream_);
    fresh_master = true;
  }
  ++state.version;
  if (!std::holds_alternative<std::monostate>(scheduler_)) {
    const double lr = learning_rate(scheduler_, static_cast<std::int64_t>(state.version) + state.schedule_shift);
    if (auto* sgd = std::get_if<kernels::sgd_options>(&rule)) sgd->lr = lr;
    if (auto* adam = std::get_if<kernels::adam_options>(&rule)) adam->lr = lr;
  }
  if (device_.kind() == device_kind::cuda)
    return update_rows_on_cuda(state, lists, rule, fresh, step,
                               kernels::is_half(type) && optimizer && multi_precision_ ? state.master : tensor{},
                               fresh_master, status);
  tensor dense = std::holds_alternative<kvstore::updater>(rule)
                     ? tensor::empty(state.value.shape(), dtype::float32, device_, stream_)
                     : tensor{};
  kernels::on_stream(
      stream_, {.name = "kvstore_row_sparse_update", .kind = work_kind::pointwise},
      [lists = std::move(lists), stored = state.value, opt = state.optimizer_state, dense, rule, fresh, step, status,
       master = kernels::is_half(type) && optimizer && multi_precision_ ? state.master : tensor{}, fresh_master, type,
       label = work_label{"push: the row-sparse update", state.label}](auto target) {
        if constexpr (!kernels::is_cuda_target<decltype(target)>) {  // cuda stores: update_rows_on_cuda
          run_guarded(*status, label, [&] {
            // The sum by id, in id order (repeated ids add up, in the order pushed).
            const summed_rows sums = sum_by_id(lists);
            const bool half = kernels::is_half(type);
            float* value = half ? nullptr : stored.template device_data<float>();
            auto* bits = half ? static_cast<std::uint16_t*>(stored.raw_data()) : nullptr;
            // Rows lie far apart in a big key (a cache and TLB miss each): fetch a few rows ahead.
            const std::size_t element = half ? 2 : 4;
            auto* base = static_cast<char*>(stored.raw_data());
            // The float32 rows kept beside the value: optimizer states, the multi_precision master.
            std::vector<const char*> float_bases;
            for (const auto& t : opt) float_bases.push_back(static_cast<const char*>(t.raw_data()));
            if (master.valid()) float_bases.push_back(static_cast<const char*>(master.raw_data()));
            auto each_row = [&](auto&& f) {
              for (std::size_t i = 0; i < sums.offsets.size(); ++i) {
                if (const std::size_t ahead = i + rows_ahead; ahead < sums.offsets.size()) {
                  const std::size_t bytes = sums.lengths[ahead] * element;
                  prefetch<1>(base + sums.offsets[ahead] * element, bytes);
                  for (const char* b : float_bases) prefetch<1>(b + sums.offsets[ahead] * 4, sums.lengths[ahead] * 4);
                }
                f(sums.offsets[i], sums.lengths[i], sums.rows[i]);
              }
            };
            const std::size_t n = static_cast<std::size_t>(stored.numel());
            for (const auto& t : opt)
              if (fresh) std::fill(t.template device_data<float>(), t.template device_data<float>() + n, 0.0f);
            float* kept = master.valid() ? master.template device_data<float>() : nullptr;
            if (fresh_master) kernels::cpu::widen(type, n, bits, kept);
            // The optimizer's rows in float32: the value's, the master copy's (then rounded into
            // the value), or the value's widened and rounded back (16-bit, no master).
            std::vector<float> widened;
            auto each_param = [&](auto&& f) {
              each_row([&](std::size_t at, std::size_t len, const float* row) {
                if (!half) return f(at, len, value + at, row);
                float* param = kept ? kept + at : (widened.resize(len), widened.data());
                if (!kept) kernels::cpu::widen(type, len, bits + at, param);
                f(at, len, param, row);
                kernels::cpu::narrow(type, len, param, bits + at);
              });
            };
            std::visit(
                [&](const auto& r) {
                  using rule_type = std::decay_t<decltype(r)>;
                  if constexpr (std::is_same_v<rule_type, std::monostate>) {  // a 16-bit sum is rounded once
                    std::memset(stored.raw_data(), 0, n * size_of(type));
                    each_row([&](std::size_t at, std::size_t len, const float* row) {
                      if (half) kernels::cpu::narrow(type, len, row, bits + at);
                      else std::copy(row, row + len, value + at);
                    });
                  } else if constexpr (std::is_same_v<rule_type, kvstore::updater>) {
                    float* d = dense.template device_data<float>();
                    std::fill(d, d + n, 0.0f);
                    each_row([&](std::size_t at, std::size_t len, const float* row) { std::copy(row, row + len, d + at); });
                    tensor target_value = stored;
                    r(label.key, dense, target_value);
                  } else if constexpr (std::is_same_v<rule_type, kernels::sgd_options>) {
                    float* momentum = opt.empty() ? nullptr : opt[0].template device_data<float>();
                    each_param([&](std::size_t at, std::size_t len, float* param, const float* row) {
                      kernels::cpu::sgd_step(len, param, row, momentum ? momentum + at : nullptr, r);
                    });
                  } else {
                    each_param([&](std::size_t at, std::size_t len, float* param, const float* row) {
                      kernels::cpu::adam_step(len, param, row, opt[0].template device_data<float>() + at,
                                              opt[1].template device_data<float>() + at, step, r);
                    });
                  }
                },
                rule);
          });
        }
      });
}

event kvstore_actor::enqueue_row_pull(const std::vector<kvstore::key>& keys, const std::vector<row_pieces>& outs,
                                      const std::shared_ptr<work_status>& status) {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (outs[i].pieces.empty()) continue;
    stream_.wait(outs[i].data.ready_event());  // whatever the caller queued on the output comes first
    if (device_.kind() == device_kind::cuda) {
      const key_state& state = keys_.at(keys[i]);
      pull_rows_on_cuda(state.value, outs[i], status, {"row_sparse_pull: the copy of the rows", state.label});
      continue;
    }
    kernels::on_stream(stream_, {.name = "kvstore_row_sparse_pull", .kind = work_kind::copy},
                       [stored = keys_.at(keys[i]).value, list = outs[i]](auto target) {
                         if constexpr (!kernels::is_cuda_target<decltype(target)>) {
                           // The output has the key's dtype (checked), unless a load replaced the
                           // key meanwhile: then nothing of it is copied.
                           if (stored.dtype() != list.data.dtype()) return;
                           const std::size_t size = size_of(stored.dtype());
                           const auto* from = static_cast<const std::byte*>(stored.raw_data());
                           auto* to = static_cast<std::byte*>(list.data.raw_data());
                           const auto n = static_cast<std::size_t>(stored.numel());
                           const auto& pieces = list.pieces;
                           for (std::size_t j = 0; j < pieces.size(); ++j) {
                             if (j + rows_ahead < pieces.size()) {
                               const auto& next = pieces[j + rows_ahead];
                               if (next.offset + next.length <= n) prefetch<0>(from + next.offset * size, next.length * size);
                             }
                             const auto& p = pieces[j];  // a load may have replaced the key meanwhile
                             if (p.offset + p.length <= n) std::memcpy(to + p.at * size, from + p.offset * size, p.length * size);
                           }
                         }
                       });
  }
  return stream_.record();
}

// ---- cuda stores ----------------------------------------------------------------------------
// The row ids are turned into element ranges on the host (checked there, sum_order gives the
// cpu's order of additions), copied to the device on the store's stream (tensor::from_host reads
// them before it returns; the device copies are the store's own, freed in stream order after the
// kernels), and read there by kernels::cuda's row-sparse kernels, which only enqueue.

namespace {

static_assert(sizeof(kernels::cuda::row_span) == 3 * sizeof(std::int64_t) &&
              sizeof(kernels::cuda::row_sum) == 4 * sizeof(std::int64_t));

/// `values` on `d`, copied in `s`'s order.
tensor device_int64s(const std::vector<std::int64_t>& values, device& d, const stream& s) {
  return tensor::from_host<std::int64_t>(std::span<const std::int64_t>(values), d, s);
}

/// A device array of int64s as the array of kernel structs (or pointers) it holds.
template <class T>
T* device_array(const tensor& t) {
  return t.valid() ? reinterpret_cast<T*>(t.device_data<std::int64_t>()) : nullptr;
}

}  // namespace

row_pieces kvstore_actor::rows_on_store(const row_pieces& list, const std::shared_ptr<work_status>& status,
                                        const work_label& label) {
  if (list.pieces.empty()) return row_pieces{tensor{}, {}};  // nothing of it is read
  const auto n = static_cast<std::size_t>(list.data.numel());
  tensor own = tensor::empty({list.data.numel()}, list.data.dtype(), device_, stream_);
  copy_elements(own, 0, list.data, 0, n, status, label);
  if (kernels::is_half(own.dtype())) own = converted(own, dtype::float32, status, label);  // summed in float32
  return row_pieces{own, list.pieces};
}

void kvstore_actor::update_rows_on_cuda(key_state& state, const std::vector<row_pieces>& lists,
                                        const update_rule& rule, bool fresh, std::int64_t step, const tensor& master,
                                        bool fresh_master, const std::shared_ptr<work_status>& status) {
  // Optimizers read the sums from a packed buffer; assign and a user updater get them in place.
  const bool packed =
      std::holds_alternative<kernels::sgd_options>(rule) || std::holds_alternative<kernels::adam_options>(rule);
  const bool half = kernels::is_half(state.value.dtype());
  const std::vector<ordered_piece> order = sum_order(lists);
  std::vector<std::int64_t> plan, spans, sources, rounded;  // rounded: a 16-bit key's rows, {offset, offset, length}
  std::size_t rows = 0, max_length = 0, total = 0;
  for (std::size_t i = 0; i < order.size(); ++rows) {
    std::size_t end = i + 1;
    while (end < order.size() && order[end].piece->id == order[i].piece->id) ++end;
    const row_piece& p = *order[i].piece;  // the id's pieces cover the same elements
    const auto at = static_cast<std::int64_t>(total), offset = static_cast<std::int64_t>(p.offset),
               length = static_cast<std::int64_t>(p.length);
    plan.insert(plan.end(),
                {static_cast<std::int64_t>(i), static_cast<std::int64_t>(end), packed ? at : offset, length});
    spans.insert(spans.end(), {at, offset, length});
    if (half) rounded.insert(rounded.end(), {offset, offset, length});
    total += p.length;
    max_length = std::max(max_length, p.length);
    i = end;
  }
  for (const ordered_piece& x : order)
    sources.push_back(static_cast<std::int64_t>(
        reinterpret_cast<std::uintptr_t>(x.list->data.device_data<float>() + x.piece->at)));
  const tensor plan_d = rows > 0 ? device_int64s(plan, device_, stream_) : tensor{};
  const tensor spans_d = rows > 0 && packed ? device_int64s(spans, device_, stream_) : tensor{};
  const tensor sources_d = rows > 0 ? device_int64s(sources, device_, stream_) : tensor{};
  const tensor sums = packed && total > 0
                          ? tensor::empty({static_cast<std::int64_t>(total)}, dtype::float32, device_, stream_)
                          : tensor{};
  const tensor rounded_d = rows > 0 && half && packed ? device_int64s(rounded, device_, stream_) : tensor{};
  const bool user = std::holds_alternative<kvstore::updater>(rule);
  const tensor dense = user ? tensor::empty(state.value.shape(), dtype::float32, device_, stream_) : tensor{};
  // What the rule writes in float32: the value itself; for a 16-bit key its master (an optimizer
  // under multi_precision) or a temporary, the value widened (an optimizer without one, as the cpu
  // widens each row) or zeros (assign, whose sums are then rounded into the key once).
  const tensor param = !half ? state.value
                       : master.valid() ? master
                       : user ? tensor{}
                              : tensor::empty(state.value.shape(), dtype::float32, device_, stream_);
  const bool widen_first = half && packed && (fresh_master || !master.valid());
  const work_label label{"push: the row-sparse update", state.label};
  kernels::on_stream(
      stream_, {.name = "kvstore_row_sparse_update", .kind = work_kind::pointwise},
      [plan_d, spans_d, sources_d, rounded_d, sums, dense, param, half, widen_first, rows, max_length,
       stored = state.value, opt = state.optimizer_state, rule, fresh, step, status, label](auto target) {
        if constexpr (kernels::is_cuda_target<decltype(target)>) {
          namespace kc = kernels::cuda;
          run_guarded(*status, label, [&] {
            const auto& ctx = target.context;
            const auto n = static_cast<std::size_t>(stored.numel());
            const auto* row_plan = device_array<const kc::row_sum>(plan_d);
            const auto* from = device_array<const float* const>(sources_d);
            const auto* row_spans = device_array<const kc::row_span>(spans_d);
            const auto format = kernels::cuda_half_format(half ? stored.dtype() : dtype::float16);
            auto* bits = half ? static_cast<std::uint16_t*>(stored.raw_data()) : nullptr;
            float* value = param.valid() ? param.device_data<float>() : nullptr;
            float* summed = sums.valid() ? sums.device_data<float>() : nullptr;
            if (fresh)
              for (const auto& t : opt) kc::fill(ctx, n, 0.0f, t.device_data<float>());
            if (widen_first) kc::widen(ctx, format, n, bits, value);
            // A 16-bit key: the optimizer's rows rounded back into it.
            const auto* rounded_rows = device_array<const kc::row_span>(rounded_d);
            auto round_rows = [&] {
              if (half) kc::narrow_rows(ctx, format, rows, max_length, rounded_rows, value, bits);
            };
            std::visit(
                [&](const auto& r) {
                  using rule_type = std::decay_t<decltype(r)>;
                  if constexpr (std::is_same_v<rule_type, std::monostate>) {  // the key becomes the sum
                    kc::fill(ctx, n, 0.0f, value);
                    kc::sum_rows(ctx, rows, max_length, row_plan, from, value);
                    if (half) kc::narrow(ctx, format, n, value, bits);  // zeros stay zeros
                  } else if constexpr (std::is_same_v<rule_type, kvstore::updater>) {  // called after this item
                    kc::fill(ctx, n, 0.0f, dense.device_data<float>());
                    kc::sum_rows(ctx, rows, max_length, row_plan, from, dense.device_data<float>());
                  } else if constexpr (std::is_same_v<rule_type, kernels::sgd_options>) {
                    kc::sum_rows(ctx, rows, max_length, row_plan, from, summed);
                    float* momentum = opt.empty() ? nullptr : opt[0].device_data<float>();
                    kc::sgd_rows(ctx, rows, max_length, row_spans, value, summed, momentum, r);
                    round_rows();
                  } else {
                    kc::sum_rows(ctx, rows, max_length, row_plan, from, summed);
                    kc::adam_rows(ctx, rows, max_length, row_spans, value, summed, opt[0].device_data<float>(),
                                  opt[1].device_data<float>(), step, r);
                    round_rows();
                  }
                },
                rule);
          });
        }
      });
  if (user)
    run_user_updater(
        merge_work{.key = state.label, .merged = dense, .complete = true, .stored = state.value, .rule = rule}, *status,
        label.action);
}

void kvstore_actor::pull_rows_on_cuda(const tensor& stored, const row_pieces& out,
                                      const std::shared_ptr<work_status>& status, const work_label& label) {
  // The output has the key's dtype (checked), unless a load replaced the key meanwhile: then
  // nothing of it is copied, nor a piece outside the key now held (as on cpu stores).
  if (stored.dtype() != out.data.dtype()) return;
  const auto n = static_cast<std::size_t>(stored.numel());
  std::vector<std::int64_t> spans;
  std::vector<row_piece> copied;  // with `offset` their place in the gathered rows
  std::size_t total = 0, max_length = 0;
  bool in_order = true;  // the pieces fill the output in order: the gathered rows are the output
  for (const row_piece& p : out.pieces) {
    if (p.offset + p.length > n) continue;
    spans.insert(spans.end(), {static_cast<std::int64_t>(p.offset), static_cast<std::int64_t>(total),
                               static_cast<std::int64_t>(p.length)});
    in_order = in_order && p.at == total;
    copied.push_back({p.id, total, p.length, p.at});
    total += p.length;
    max_length = std::max(max_length, p.length);
  }
  if (total == 0) return;
  const tensor spans_d = device_int64s(spans, device_, stream_);
  const dtype type = stored.dtype();  // float32, or a 16-bit key's bits, gathered as they are
  const std::size_t element = size_of(type);
  const tensor gathered = tensor::empty({static_cast<std::int64_t>(total)}, type, device_, stream_);
  kernels::on_stream(stream_,
                     {.name = "kvstore_row_sparse_pull", .kind = work_kind::copy,
                      .bytes = 2.0 * static_cast<double>(element * total)},
                     [stored, spans_d, gathered, count = copied.size(), max_length, status, label](auto target) {
                       if constexpr (kernels::is_cuda_target<decltype(target)>) {
                         run_guarded(*status, label, [&] {
                           const auto* row_spans = device_array<const kernels::cuda::row_span>(spans_d);
                           if (kernels::is_half(stored.dtype()))
                             kernels::cuda::copy_rows(target.context, count, max_length, row_spans,
                                                      static_cast<const std::uint16_t*>(stored.raw_data()),
                                                      static_cast<std::uint16_t*>(gathered.raw_data()));
                           else
                             kernels::cuda::copy_rows(target.context, count, max_length, row_spans,
                                                      stored.device_data<float>(), gathered.device_data<float>());
                         });
                       }
                     });
  const std::size_t bytes = total * element;
  if (in_order && static_cast<std::size_t>(out.data.numel()) == total) {
    stream_.copy(out.data.storage(), gathered.storage(), bytes);
    return;
  }
  device where = out.data.get_device();
  stream other = transfer_stream(where);
  const tensor host = tensor::empty({static_cast<std::int64_t>(total)}, type, where, other);
  stream_.copy(host.storage(), gathered.storage(), bytes);
  other.wait(stream_.record());
  kernels::on_stream(other,
                     {.name = "kvstore_row_sparse_pull_place", .kind = work_kind::copy,
                      .bytes = 2.0 * static_cast<double>(bytes)},
                     [host, to = out.data, copied = std::move(copied), element](auto target) {
                       if constexpr (!kernels::is_cuda_target<decltype(target)>) {  // the output is a cpu tensor
                         const auto* from = static_cast<const std::byte*>(host.raw_data());
                         auto* into = static_cast<std::byte*>(to.raw_data());
                         for (const row_piece& p : copied)
                           std::memcpy(into + p.at * element, from + p.offset * element, p.length * element);
                       }
                     });
  stream_.wait(other.record());  // the reply follows the copies
}

}  // namespace strata::kvstore::internal
