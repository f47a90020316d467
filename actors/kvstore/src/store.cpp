#include "store.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>
#include <variant>

#include "strata/device_messages.hpp"
#include "strata/kernels/half.hpp"

namespace strata::kvstore::internal {

kvstore_actor::kvstore_actor(kvstore::options options)
    : options_(std::move(options)),
      admission_(options_.max_in_flight, [this] { send_on_complete(stream_, self(), request_done{}); }) {
  if (options_.kind == kvstore::kind::local) {
    owned_devices_ = std::make_unique<device_manager>(device_options{.cpu_threads_per_device = 1});
    device_ = owned_devices_->create("cpu:1").at(0);
  } else {
    device_ = options_.merge_device;
  }
  stream_ = device_.create_stream();
  place_ = store_place{device_.kind(), device_.name()};
}

behavior kvstore_actor::make_behavior() {
  return {
      admitted(&kvstore_actor::on_init),
      admitted(&kvstore_actor::on_push),
      admitted(&kvstore_actor::on_pull),
      admitted(&kvstore_actor::on_pushpull),
      admitted(&kvstore_actor::on_pushpull_in_place),
      admitted(&kvstore_actor::on_broadcast),
      admitted(&kvstore_actor::on_set_updater),
      admitted(&kvstore_actor::on_set_optimizer),
      admitted(&kvstore_actor::on_set_learning_rate),
      admitted(&kvstore_actor::on_set_gradient_compression),
      admitted(&kvstore_actor::on_version),
      admitted(&kvstore_actor::on_save),
      admitted(&kvstore_actor::on_load),
      admitted(&kvstore_actor::on_push_row_sparse),
      admitted(&kvstore_actor::on_row_sparse_pull),
      admitted(&kvstore_actor::on_save_optimizer_states),
      admitted(&kvstore_actor::on_load_optimizer_states),
      // From a sharded store's router.
      admitted(&kvstore_actor::on_shard_init),
      admitted(&kvstore_actor::on_shard_request),
      admitted(&kvstore_actor::on_shard_row_sparse),
      admitted(&kvstore_actor::on_shard_save),
      admitted(&kvstore_actor::on_shard_load),
      admitted(&kvstore_actor::on_shard_load_optimizer_states),
      [this](const shard_commit& m) {
        if (m.keep && staged_) {
          keys_ = std::move(*staged_);
          int_keys_ = true;
          reconcile_parked();
        }
        staged_.reset();
      },
      [](optimizer_states_taken& m) {
        auto written = m.entries ? write_optimizer_states(m.path, m.setting, std::move(*m.entries))
                                 : expected<void>(m.entries.error());
        written ? m.promise.deliver(unit) : m.promise.deliver(written.error());
      },
      [](checkpoint_taken& m) {
        auto written = m.entries ? write_checkpoint(m.path, *m.entries) : expected<void>(m.entries.error());
        written ? m.promise.deliver(unit) : m.promise.deliver(written.error());
      },
      [this](const kvstore::store_type&) -> std::string {
        if (!options_.type_name.empty()) return options_.type_name;
        return options_.kind == kvstore::kind::local ? "local" : "device";
      },
      [](const kvstore::is_capable& m) -> expected<bool> { return has_capability(m.capability); },
      [this](const request_done&) { admission_.finished_one(); },
      [this](const device_failure&) { admission_.finished_one(); },  // the replies carry the failure
  };
}

void kvstore_actor::on_exit(const error&) {
  // Parked pulls and queued requests can never be answered now.
  const error parked(errc::stopped, "kvstore pull: the store stopped before the requested version existed.");
  for (auto& p : parked_) p.serve(&parked);
  parked_.clear();
  admission_.fail_all(error(errc::stopped, "kvstore: the store stopped before it served this request."));
}

shape_lookup kvstore_actor::shape_of() const {
  return [this](const kvstore::key& key) -> key_layout {
    auto it = keys_.find(key);
    if (it == keys_.end()) return {};
    return {&it->second.value.shape(), it->second.value.dtype()};
  };
}

// ---- requests -------------------------------------------------------------------------------

expected<void> kvstore_actor::on_init(kvstore::init& m, response_promise<unit_t>& p) {
  std::optional<bool> kind = int_keys_;
  if (auto r = check_init(m, kind, shape_of(), place_, options_.init_existing); !r) return r;
  int_keys_ = kind;
  auto status = std::make_shared<work_status>();
  add_new_keys(m, status);
  reply_when_done(p, status);
  return {};
}

/// The keys of an init the store does not hold yet (the others keep their value: keep_first).
void kvstore_actor::add_new_keys(const kvstore::init& m, const std::shared_ptr<work_status>& status) {
  for (std::size_t i = 0; i < m.keys.size(); ++i)
    if (!keys_.contains(m.keys[i])) add_key(m.keys[i], m.keys[i], m.values[i].shape(), slice_ref{m.values[i], 0}, status);
}

expected<void> kvstore_actor::on_pushpull_in_place(kvstore::pushpull_in_place& m,
                                                   response_promise<std::vector<tensor>>& p) {
  kvstore::pushpull both = as_pushpull(m);
  return on_pushpull(both, p);
}

expected<void> kvstore_actor::on_broadcast(kvstore::broadcast& m, response_promise<std::vector<tensor>>& p) {
  std::optional<bool> kind = int_keys_;
  if (auto r = check_broadcast(m, kind, shape_of(), place_, options_.init_existing); !r) return r;
  int_keys_ = kind;
  auto status = std::make_shared<work_status>();
  add_new_keys(m.init, status);
  event done = enqueue_pull(m.pull.keys, whole(m.pull.outs), status);
  for (auto& out : m.pull.outs) out.set_ready_event(done);
  reply_when_done(p, std::move(m.pull.outs), status);
  return {};
}

expected<void> kvstore_actor::on_push(kvstore::push& m, response_promise<unit_t>& p) {
  if (auto r = check_existing("push", "value", m.keys, m.values, int_keys_, shape_of(), place_); !r) return r;
  if (auto r = check_round_kind("push", m.keys, false); !r) return r;
  auto status = std::make_shared<work_status>();
  enqueue_push(m.keys, whole(m.values), status);
  reply_when_done(p, status);
  serve_parked();
  return {};
}

expected<void> kvstore_actor::on_pull(kvstore::pull& m, response_promise<std::vector<tensor>>& p) {
  if (auto r = check_existing("pull", "output", m.keys, m.outs, int_keys_, shape_of(), place_); !r) return r;
  auto serve = [this, keys = m.keys, outs = m.outs, p](const error* stopped) mutable {
    if (stopped) return p.deliver(*stopped);
    auto status = std::make_shared<work_status>();
    event done = enqueue_pull(keys, whole(outs), status);
    for (auto& out : outs) out.set_ready_event(done);
    reply_when_done(p, std::move(outs), status);
  };
  std::vector<std::uint64_t> versions(m.keys.size(), m.min_version);
  if (!version_reached(m.keys, versions)) parked_.push_back(parked_pull{m.keys, std::move(versions), std::move(serve)});
  else serve(nullptr);
  return {};
}

expected<void> kvstore_actor::on_pushpull(kvstore::pushpull& m, response_promise<std::vector<tensor>>& p) {
  if (auto r = check_existing("pushpull", "value", m.push.keys, m.push.values, int_keys_, shape_of(), place_); !r)
    return r;
  if (auto r = check_existing("pushpull", "output", m.pull.keys, m.pull.outs, int_keys_, shape_of(), place_); !r)
    return r;
  if (auto r = check_round_kind("pushpull", m.push.keys, false); !r) return r;
  auto status = std::make_shared<work_status>();
  enqueue_push(m.push.keys, whole(m.push.values), status);
  // Synchronous mode: the pull waits for the version this push contributes to, and answers with
  // the merged value (MXNet's dist_sync pushpull; Gluon's Trainer.step relies on it).
  auto versions = own_rounds(m.push.keys, m.pull.keys);
  auto serve = [this, keys = m.pull.keys, outs = std::move(m.pull.outs), p, status](const error* stopped) mutable {
    if (stopped) return p.deliver(*stopped);
    event done = enqueue_pull(keys, whole(outs), status);
    for (auto& out : outs) out.set_ready_event(done);
    reply_when_done(p, std::move(outs), status);
  };
  if (!version_reached(m.pull.keys, versions))
    parked_.push_back(parked_pull{m.pull.keys, std::move(versions), std::move(serve)});
  else serve(nullptr);
  serve_parked();
  return {};
}

expected<void> kvstore_actor::on_set_updater(kvstore::set_updater& m, response_promise<unit_t>& p) {
  if (m.updater) rule_ = std::move(m.updater);
  else rule_ = std::monostate{};
  scheduler_ = {};
  multi_precision_ = false;
  for (auto& [key, state] : keys_) state.master = {};
  p.deliver(unit);
  return {};
}

expected<void> kvstore_actor::on_set_optimizer(kvstore::set_optimizer& m, response_promise<unit_t>& p) {
  if (auto r = prepare_optimizer(m); !r) return r;
  std::visit([this](const auto& o) { rule_ = o; }, m.options);
  scheduler_ = m.scheduler;
  multi_precision_ = m.multi_precision;
  for (auto& [key, state] : keys_) {  // a new optimizer starts fresh
    state.optimizer_state.clear();
    state.master = {};
    state.schedule_shift = 0;
  }
  p.deliver(unit);
  return {};
}

expected<void> kvstore_actor::on_set_learning_rate(kvstore::set_learning_rate& m, response_promise<unit_t>& p) {
  const bool has_optimizer =
      std::holds_alternative<kernels::sgd_options>(rule_) || std::holds_alternative<kernels::adam_options>(rule_);
  if (auto r = check_learning_rate(m.lr, has_optimizer, !std::holds_alternative<std::monostate>(scheduler_)); !r)
    return r;
  std::visit(
      [&m](auto& rule) {
        if constexpr (requires { rule.lr; }) rule.lr = m.lr;
      },
      rule_);
  p.deliver(unit);
  return {};
}

expected<void> kvstore_actor::on_set_gradient_compression(kvstore::set_gradient_compression& m,
                                                          response_promise<unit_t>& p) {
  auto type = parse_compression(m.type, m.threshold);
  if (!type) return type.error();
  const std::string what = "kvstore set_gradient_compression: ";
  if (*type != compression_type::none) {
    if (device_.kind() != device_kind::cpu && device_.kind() != device_kind::cuda)  // sim items compute nothing
      return bad(what + "compression runs on cpu and cuda stores only (this store merges on " + device_.name() + ").");
    if (options_.contributions_per_version > 1)
      return bad(what + "this store's versions collect the pushes of " +
                 std::to_string(options_.contributions_per_version) +
                 " workers, whose residuals it cannot tell apart; compress on each worker instead.");
  }
  compression_ = *type;
  compression_threshold_ = m.threshold;
  for (auto& [key, state] : keys_) state.residuals.clear();  // a new setting starts from zero residuals
  p.deliver(unit);
  return {};
}

expected<void> kvstore_actor::on_version(kvstore::version& m, response_promise<std::uint64_t>& p) {
  auto it = keys_.find(m.key);
  if (it == keys_.end()) return bad("kvstore version: key " + m.key.to_string() + " is not initialised.");
  p.deliver(it->second.version);
  return {};
}

expected<void> kvstore_actor::on_save(kvstore::save& m, response_promise<unit_t>& p) {
  return snapshot([sys = &system(), me = self(), path = m.path, p](expected<std::vector<checkpoint_entry>> taken) mutable {
    (void)sys->send(me, checkpoint_taken{path, std::move(taken), p});
  });
}

expected<void> kvstore_actor::on_load(kvstore::load& m, response_promise<unit_t>& p) {
  auto file = read_checkpoint(m.path);
  if (!file) return file.error();
  std::vector<checkpoint_piece> pieces;
  for (std::size_t i = 0; i < file->entries.size(); ++i)
    pieces.push_back({file->entries[i].key, file->entries[i].key, i, 0, file->entries[i].shape});
  return stage(p, file->entries, pieces, [this, kind = file->int_keys](key_map& staged) {
    keys_ = std::move(staged);
    int_keys_ = kind;
    reconcile_parked();
  });
}

expected<void> kvstore_actor::on_save_optimizer_states(kvstore::save_optimizer_states& m, response_promise<unit_t>& p) {
  optimizer_setting setting;
  if (const auto* sgd = std::get_if<kernels::sgd_options>(&rule_)) setting.options = *sgd;
  else if (const auto* adam = std::get_if<kernels::adam_options>(&rule_)) setting.options = *adam;
  else return bad(no_optimizer_to_save);
  setting.scheduler = scheduler_;
  setting.multi_precision = multi_precision_;
  return snapshot([sys = &system(), me = self(), path = m.path, setting, p](expected<std::vector<checkpoint_entry>> taken) mutable {
    (void)sys->send(me, optimizer_states_taken{path, setting, std::move(taken), p});
  });
}

expected<void> kvstore_actor::on_load_optimizer_states(kvstore::load_optimizer_states& m, response_promise<unit_t>& p) {
  auto file = read_optimizer_states(m.path, shape_of());
  if (!file) return file.error();
  std::vector<checkpoint_piece> pieces;
  for (std::size_t i = 0; i < file->entries.size(); ++i)
    pieces.push_back({file->entries[i].key, file->entries[i].key, i, 0, file->entries[i].shape});
  install_optimizer_states(file->setting, file->entries, pieces, p);
  return {};
}

expected<void> kvstore_actor::on_shard_load_optimizer_states(shard_load_optimizer_states& m, response_promise<unit_t>& p) {
  install_optimizer_states(m.setting, *m.file, m.pieces, p);
  return {};
}

void kvstore_actor::install_optimizer_states(const optimizer_setting& setting, const std::vector<checkpoint_entry>& file,
                                             const std::vector<checkpoint_piece>& pieces, response_promise<unit_t>& p) {
  std::visit([this](const auto& o) { rule_ = o; }, setting.options);
  scheduler_ = setting.scheduler;
  multi_precision_ = setting.multi_precision;
  for (auto& [key, state] : keys_) {
    state.optimizer_state.clear();
    state.master = {};
    state.step = 0;
    state.schedule_shift = 0;
  }
  for (const auto& piece : pieces) {
    const checkpoint_entry& e = file[piece.entry];
    key_state& state = keys_.at(piece.key);  // checked against the keys before
    state.step = e.step;
    state.schedule_shift = static_cast<std::int64_t>(e.version) - static_cast<std::int64_t>(state.version);
    std::size_t n = 1;
    for (auto d : piece.shape) n *= static_cast<std::size_t>(d);
    auto part = [&](const std::vector<float>& a) {
      return tensor::from_host<float>(std::span<const float>(a).subspan(piece.offset, n), state.value.shape(), device_, stream_);
    };
    for (const auto& a : e.arrays) state.optimizer_state.push_back(part(a));
    if (!e.master.empty()) state.master = part(e.master);
  }
  reply_when_done(p, std::make_shared<work_status>());
}

expected<void> kvstore_actor::on_shard_init(shard_init& m, response_promise<unit_t>& p) {
  auto status = std::make_shared<work_status>();
  for (std::size_t i = 0; i < m.keys.size(); ++i) add_key(m.keys[i], m.labels[i], {m.lengths[i]}, m.values[i], status);
  int_keys_ = true;
  reply_when_done(p, status);
  return {};
}

/// The router checked the request against the caller's keys; chunk keys exist by construction.
/// The reply: for each pushed chunk key, the version its value belongs to (`round_of`), which a
/// router passes as `pull_versions` when it pulls in a later step.
expected<void> kvstore_actor::on_shard_request(shard_request& m, response_promise<std::vector<std::uint64_t>>& p) {
  if (auto r = still_held(m.push_keys, m.pull_keys); !r) return r;
  if (!m.pull_versions.empty() && m.pull_versions.size() != m.pull_keys.size())
    return bad("kvstore shard request: " + std::to_string(m.pull_versions.size()) + " versions for " +
               std::to_string(m.pull_keys.size()) + " pulled keys; expected one per key.");
  if (auto r = check_round_kind("push", m.push_keys, false); !r) return r;
  auto status = std::make_shared<work_status>();
  std::vector<std::uint64_t> rounds;
  if (!m.push_keys.empty()) {
    enqueue_push(m.push_keys, m.values, status);
    rounds.reserve(m.push_keys.size());
    for (const auto& key : m.push_keys) rounds.push_back(round_of(key));
  }
  if (!m.pull_keys.empty()) {
    std::vector<std::uint64_t> versions = m.pull_versions;
    if (versions.empty())
      versions = m.push_keys.empty() ? std::vector<std::uint64_t>(m.pull_keys.size(), m.min_version)
                                     : own_rounds(m.push_keys, m.pull_keys);
    auto serve = [this, keys = m.pull_keys, outs = m.outs, p, status, rounds](const error* stopped) mutable {
      if (stopped) return p.deliver(*stopped);
      (void)enqueue_pull(keys, outs, status);
      reply_when_done(p, std::move(rounds), status);
    };
    if (!version_reached(m.pull_keys, versions))
      parked_.push_back(parked_pull{m.pull_keys, std::move(versions), std::move(serve)});
    else serve(nullptr);
  } else {
    reply_when_done(p, std::move(rounds), status);
  }
  if (!m.push_keys.empty()) serve_parked();
  return {};
}

expected<void> kvstore_actor::on_shard_save(shard_save&, response_promise<std::vector<checkpoint_entry>>& p) {
  return snapshot([p](expected<std::vector<checkpoint_entry>> taken) mutable {
    taken ? p.deliver(std::move(*taken)) : p.deliver(taken.error());
  });
}

expected<void> kvstore_actor::on_shard_load(shard_load& m, response_promise<unit_t>& p) {
  return stage(p, *m.file, m.pieces, [this](key_map& staged) { staged_ = std::move(staged); });
}

/// A load between two steps of one request (or while it waited at the router) may have replaced
/// a shard's keys.
expected<void> kvstore_actor::still_held(const std::vector<kvstore::key>& pushed,
                                         const std::vector<kvstore::key>& pulled) const {
  for (const auto* keys : {&pushed, &pulled})
    for (const auto& key : *keys)
      if (!keys_.contains(key))
        return bad("kvstore request: key " + key.to_string() +
                   " is no longer in the store; a load replaced the store's keys while the request was in flight.");
  return {};
}

// ---- parked pulls (waiting for a version) -----------------------------------------------------

bool kvstore_actor::version_reached(const std::vector<kvstore::key>& keys,
                                    const std::vector<std::uint64_t>& versions) const {
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (versions[i] > 0 && keys_.at(keys[i]).version < versions[i]) return false;
  return true;
}

std::uint64_t kvstore_actor::round_of(const kvstore::key& key) const {
  const key_state& state = keys_.at(key);
  return state.received == 0 ? state.version : state.version + 1;
}

std::vector<std::uint64_t> kvstore_actor::own_rounds(const std::vector<kvstore::key>& push_keys,
                                                     const std::vector<kvstore::key>& pull_keys) const {
  std::vector<std::uint64_t> versions(pull_keys.size(), 0);
  if (options_.contributions_per_version == 0) return versions;
  std::vector<kvstore::key> pushed = push_keys;
  std::sort(pushed.begin(), pushed.end());
  for (std::size_t i = 0; i < pull_keys.size(); ++i)
    if (std::binary_search(pushed.begin(), pushed.end(), pull_keys[i])) versions[i] = round_of(pull_keys[i]);
  return versions;
}

/// After a load replaced the keys: a parked pull of a key the checkpoint lacks fails, the others
/// are served once the loaded versions reach theirs.
void kvstore_actor::reconcile_parked() {
  static const error gone(errc::invalid_argument,
                          "kvstore pull: a load replaced the store's keys and a pulled key is no longer there.");
  std::erase_if(parked_, [this](parked_pull& p) {
    const bool lost = std::any_of(p.keys.begin(), p.keys.end(), [this](const kvstore::key& k) { return !keys_.contains(k); });
    if (lost) p.serve(&gone);
    return lost;
  });
  serve_parked();
}

/// Answers parked pulls whose version now exists (their copies follow the updates on the stream).
void kvstore_actor::serve_parked() {
  for (std::size_t i = 0; i < parked_.size();) {
    if (!version_reached(parked_[i].keys, parked_[i].versions)) {
      ++i;
      continue;
    }
    parked_pull p = std::move(parked_[i]);
    parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(i));
    p.serve(nullptr);
  }
}

// ---- checkpoints --------------------------------------------------------------------------------

expected<void> kvstore_actor::snapshot(std::function<void(expected<std::vector<checkpoint_entry>>)> done) {
  if (device_.kind() == device_kind::sim)
    return bad("kvstore save: the store is on " + device_.name() +
               ", whose tensors hold no data; expected a cpu or cuda store.");
  auto entries = std::make_shared<std::vector<checkpoint_entry>>();
  auto status = std::make_shared<work_status>();
  for (const auto& [key, state] : keys_) {
    auto& e = entries->emplace_back(checkpoint_entry{key, state.version, state.step, state.value.shape(), {}});
    e.type = state.value.dtype();
    // A 16-bit value is widened (exactly) on the stream first: entries hold float arrays.
    std::vector<tensor> arrays{kernels::is_half(e.type) ? converted(state.value, dtype::float32, status, {"save: the copy", state.label})
                                                        : state.value};
    arrays.insert(arrays.end(), state.optimizer_state.begin(), state.optimizer_state.end());
    for (const auto& t : arrays) {  // the copies write into buffers that stay put when vectors move
      e.arrays.emplace_back(static_cast<std::size_t>(t.numel()));
      (void)t.copy_to_host(e.arrays.back().data(), stream_);
    }
    if (state.master.valid()) {
      e.master.resize(static_cast<std::size_t>(state.master.numel()));
      (void)state.master.copy_to_host(e.master.data(), stream_);
    }
  }
  stream_.on_complete([entries, status, done = std::move(done)](std::exception_ptr e) {
    if (e) done(error(errc::runtime_failure, "kvstore save: device work failed: " + device_failure_text(e)));
    else if (status->failed()) done(error(errc::runtime_failure, status->failure()));
    else done(std::move(*entries));
  });
  return {};
}

expected<void> kvstore_actor::stage(response_promise<unit_t>& p, const std::vector<checkpoint_entry>& file,
                                    const std::vector<checkpoint_piece>& pieces,
                                    const std::function<void(key_map&)>& keep) {
  for (const auto& piece : pieces)
    if (kernels::is_half(file[piece.entry].type) && device_.kind() == device_kind::sim)
      return bad("kvstore load: key " + piece.label.to_string() + " of the checkpoint holds " +
                 std::string(to_string(file[piece.entry].type)) +
                 " values, which only cpu and cuda stores keep (this one is on " + device_.name() + ").");
  key_map staged;
  auto status = std::make_shared<work_status>();
  for (const auto& piece : pieces) {
    const checkpoint_entry& e = file[piece.entry];
    key_state state{.version = e.version, .step = e.step, .label = piece.label};
    std::size_t n = 1;
    for (auto d : piece.shape) n *= static_cast<std::size_t>(d);
    auto part = [&](const std::vector<float>& a) {
      return tensor::from_host<float>(std::span<const float>(a).subspan(piece.offset, n), piece.shape, device_, stream_);
    };
    for (const auto& a : e.arrays) {
      auto t = part(a);
      if (state.value.valid()) state.optimizer_state.push_back(std::move(t));
      else if (kernels::is_half(e.type)) state.value = converted(t, e.type, status, {"load: the copy", piece.label});
      else state.value = std::move(t);
    }
    if (!e.master.empty()) state.master = part(e.master);
    staged.emplace(piece.key, std::move(state));
  }
  keep(staged);
  reply_when_done(p, status);
  return {};
}

}  // namespace strata::kvstore::internal
