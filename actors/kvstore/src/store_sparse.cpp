#include "store.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>
#include <utility>

#include "strata/device/shape.hpp"
#include "strata/kernels/on_stream.hpp"

// Row-sparse values in one store (docs/kvstore.md, "Row-sparse values"): a push of rows by id
// and a pull of rows by id, on the store's stream.
namespace strata::kvstore::internal {

namespace {

std::size_t row_length(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) n *= static_cast<std::size_t>(shape[d]);
  return n;
}

/// The shape `rows` must have for `ids` of a key of `shape`: `[ids, shape[1], ...]`.
std::vector<std::int64_t> rows_shape(std::size_t ids, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s{static_cast<std::int64_t>(ids)};
  s.insert(s.end(), shape.begin() + 1, shape.end());
  return s;
}

/// One key's rows and ids against its stored shape: ids in range, rows of the right shape, a
/// float32 cpu tensor.
expected<void> check_rows(const char* op, const char* role, const kvstore::key& key, const tensor& rows,
                          const std::vector<std::int64_t>& ids, const std::vector<std::int64_t>& shape) {
  const std::string where = std::string("kvstore ") + op + ": the " + role + " for key " + key.to_string();
  if (shape.empty()) return bad(where + " names rows of a scalar key; row-sparse values need a key of rank 1 or more.");
  for (auto id : ids)
    if (id < 0 || id >= shape[0])
      return bad(where + " names row " + std::to_string(id) + ", outside [0, " + std::to_string(shape[0]) + ").");
  if (!rows.valid()) return bad(where + " is an empty tensor; expected a float32 tensor.");
  if (rows.dtype() != dtype::float32)
    return bad(where + " has dtype " + std::string(to_string(rows.dtype())) + ", expected float32.");
  const auto expected_shape = rows_shape(ids.size(), shape);
  if (rows.shape() != expected_shape)
    return bad(where + " has shape " + shape_text(rows.shape()) + ", expected " + shape_text(expected_shape) +
               " (one row per id).");
  if (rows.storage().kind() != device_kind::cpu)
    return bad(where + " is on " + rows.get_device().name() + "; row-sparse values are cpu tensors.");
  return {};
}

}  // namespace

expected<void> kvstore_actor::row_sparse_supported(const char* op) const {
  const std::string what = std::string("kvstore ") + op + ": ";
  if (device_.kind() != device_kind::cpu)
    return bad(what + "row-sparse values run on cpu stores only (this store merges on " + device_.name() + ").");
  if (options_.contributions_per_version != 0)
    return bad(what + "row-sparse pushes need an asynchronous store (contributions_per_version 0).");
  if (compression_ != compression_type::none)
    return bad(what + "row-sparse pushes are not compressed; turn gradient compression off first.");
  return {};
}

namespace {
/// Row-sparse pushes and pulls take float32 keys only (16-bit keys: not built yet).
expected<void> row_sparse_dtype(const char* op, const kvstore::key& key, dtype type) {
  if (type == dtype::float32) return {};
  return bad(std::string("kvstore ") + op + ": key " + key.to_string() + " holds " + std::string(to_string(type)) +
             " values; row-sparse pushes and pulls take float32 keys only.");
}
}  // namespace

expected<void> kvstore_actor::on_push_row_sparse(kvstore::push_row_sparse& m, response_promise<unit_t>& p) {
  if (auto r = row_sparse_supported("push"); !r) return r;
  if (m.keys.size() != m.values.size() || m.keys.empty())
    return bad("kvstore push: " + std::to_string(m.keys.size()) + " keys and " + std::to_string(m.values.size()) +
               " row-sparse values; expected one value per key, at least one.");
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    const auto [shape, type] = shape_of()(m.keys[i]);
    if (!shape) return bad("kvstore push: key " + m.keys[i].to_string() + " is not initialised; call init first.");
    if (auto r = row_sparse_dtype("push", m.keys[i], type); !r) return r;
    if (m.values[i].shape != *shape)
      return bad("kvstore push: the row-sparse value for key " + m.keys[i].to_string() + " has shape " +
                 shape_text(m.values[i].shape) + ", expected " + shape_text(*shape) + " (the stored shape).");
    if (auto r = check_rows("push", "row-sparse value", m.keys[i], m.values[i].rows, m.values[i].row_ids, *shape); !r)
      return r;
  }
  auto status = std::make_shared<work_status>();
  std::map<kvstore::key, std::vector<const kvstore::row_sparse*>> groups;
  for (std::size_t i = 0; i < m.keys.size(); ++i) groups[m.keys[i]].push_back(&m.values[i]);
  for (auto& [key, group] : groups) {
    key_state& state = keys_.at(key);
    std::vector<kvstore::row_sparse> values;
    for (const auto* v : group) {
      stream_.wait(v->rows.ready_event());
      values.push_back(*v);
    }
    const std::size_t cols = row_length(state.value.shape());
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
    ++state.version;
    if (!std::holds_alternative<std::monostate>(scheduler_)) {
      const double lr = learning_rate(scheduler_, static_cast<std::int64_t>(state.version));
      if (auto* sgd = std::get_if<kernels::sgd_options>(&rule)) sgd->lr = lr;
      if (auto* adam = std::get_if<kernels::adam_options>(&rule)) adam->lr = lr;
    }
    tensor dense = std::holds_alternative<kvstore::updater>(rule)
                       ? tensor::empty(state.value.shape(), dtype::float32, device_, stream_)
                       : tensor{};
    kernels::on_stream(
        stream_, {.name = "kvstore_row_sparse_update", .kind = work_kind::pointwise},
        [values = std::move(values), stored = state.value, opt = state.optimizer_state, dense, rule, fresh, step, cols,
         status, label = work_label{"push: the row-sparse update", state.label}](auto target) {
          if constexpr (kernels::is_cuda_target<decltype(target)>) {
            status->fail("kvstore push: row-sparse values have no cuda kernel.");  // refused before
          } else {
            run_guarded(*status, label, [&] {
              // The sum by id, in id order (repeated ids add up): the pushed rows sorted by id, then
              // added into one contiguous block per distinct id.
              std::vector<std::pair<std::int64_t, const float*>> parts;
              for (const auto& v : values) {
                const float* rows = v.rows.template device_data<float>();
                for (std::size_t r = 0; r < v.row_ids.size(); ++r) parts.emplace_back(v.row_ids[r], rows + r * cols);
              }
              std::stable_sort(parts.begin(), parts.end(),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
              std::vector<std::int64_t> ids;
              std::vector<float> sums;
              sums.reserve(parts.size() * cols);
              for (const auto& [id, row] : parts) {
                if (ids.empty() || ids.back() != id) {
                  ids.push_back(id);
                  sums.insert(sums.end(), row, row + cols);
                } else {
                  float* into = sums.data() + (ids.size() - 1) * cols;
                  for (std::size_t c = 0; c < cols; ++c) into[c] += row[c];
                }
              }
              auto each_row = [&](auto&& f) {
                for (std::size_t i = 0; i < ids.size(); ++i) f(static_cast<std::size_t>(ids[i]) * cols, sums.data() + i * cols);
              };
              float* value = stored.template device_data<float>();
              const std::size_t n = static_cast<std::size_t>(stored.numel());
              for (const auto& t : opt)
                if (fresh) std::fill(t.template device_data<float>(), t.template device_data<float>() + n, 0.0f);
              std::visit(
                  [&](const auto& r) {
                    using rule_type = std::decay_t<decltype(r)>;
                    if constexpr (std::is_same_v<rule_type, std::monostate>) {
                      std::fill(value, value + n, 0.0f);
                      each_row([&](std::size_t at, const float* row) { std::copy(row, row + cols, value + at); });
                    } else if constexpr (std::is_same_v<rule_type, kvstore::updater>) {
                      float* d = dense.template device_data<float>();
                      std::fill(d, d + n, 0.0f);
                      each_row([&](std::size_t at, const float* row) { std::copy(row, row + cols, d + at); });
                      tensor target_value = stored;
                      r(label.key, dense, target_value);
                    } else if constexpr (std::is_same_v<rule_type, kernels::sgd_options>) {
                      float* momentum = opt.empty() ? nullptr : opt[0].template device_data<float>();
                      each_row([&](std::size_t at, const float* row) {
                        kernels::cpu::sgd_step(cols, value + at, row, momentum ? momentum + at : nullptr, r);
                      });
                    } else {
                      each_row([&](std::size_t at, const float* row) {
                        kernels::cpu::adam_step(cols, value + at, row, opt[0].template device_data<float>() + at,
                                                opt[1].template device_data<float>() + at, step, r);
                      });
                    }
                  },
                  rule);
            });
          }
        });
  }
  reply_when_done(p, status);
  serve_parked();
  return {};
}

expected<void> kvstore_actor::on_row_sparse_pull(kvstore::row_sparse_pull& m, response_promise<std::vector<tensor>>& p) {
  if (device_.kind() != device_kind::cpu)
    return bad("kvstore row_sparse_pull: row-sparse values run on cpu stores only (this store merges on " +
               device_.name() + ").");
  if (m.keys.size() != m.row_ids.size() || m.keys.size() != m.outs.size() || m.keys.empty())
    return bad("kvstore row_sparse_pull: " + std::to_string(m.keys.size()) + " keys, " +
               std::to_string(m.row_ids.size()) + " row id lists and " + std::to_string(m.outs.size()) +
               " outputs; expected one of each per key, at least one.");
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    const auto [shape, type] = shape_of()(m.keys[i]);
    if (!shape) return bad("kvstore row_sparse_pull: key " + m.keys[i].to_string() + " is not initialised; call init first.");
    if (auto r = row_sparse_dtype("row_sparse_pull", m.keys[i], type); !r) return r;
    if (auto r = check_rows("row_sparse_pull", "output", m.keys[i], m.outs[i], m.row_ids[i], *shape); !r) return r;
  }
  auto status = std::make_shared<work_status>();
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    stream_.wait(m.outs[i].ready_event());
    const key_state& state = keys_.at(m.keys[i]);
    kernels::on_stream(stream_, {.name = "kvstore_row_sparse_pull", .kind = work_kind::copy},
                       [stored = state.value, out = m.outs[i], ids = m.row_ids[i],
                        cols = row_length(state.value.shape())](auto target) {
                         if constexpr (!kernels::is_cuda_target<decltype(target)>) {
                           const float* from = stored.template device_data<float>();
                           float* to = out.template device_data<float>();
                           for (std::size_t r = 0; r < ids.size(); ++r)
                             std::memcpy(to + r * cols, from + static_cast<std::size_t>(ids[r]) * cols, cols * sizeof(float));
                         }
                       });
  }
  const event done = stream_.record();
  for (auto& out : m.outs) out.set_ready_event(done);
  reply_when_done(p, std::move(m.outs), status);
  return {};
}

}  // namespace strata::kvstore::internal
