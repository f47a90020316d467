// A sharded store's router: its behaviour, the requests it serves and the steps they run in
// (router_actor.hpp describes the class).
#include "router_actor.hpp"

#include <algorithm>
#include <memory>
#include <utility>

namespace strata::kvstore::internal {

void kvstore_router::pump() {
  if (pumping_) {
    pump_again_ = true;
    return;
  }
  pumping_ = true;
  do {
    pump_again_ = false;
    for (std::size_t i = 0; i < stalled_.size();) {
      if (conflicts(stalled_[i]->steps[stalled_[i]->next].uses)) {
        ++i;
        continue;
      }
      auto j = std::move(stalled_[i]);
      stalled_.erase(stalled_.begin() + static_cast<std::ptrdiff_t>(i));
      send_step(std::move(j));
    }
    while (!checkpointing_ && steps_holding_ == 0 && !held_.empty()) {
      auto next = std::move(held_.front());
      held_.pop_front();
      if (!next()) {
        held_.push_front(std::move(next));
        break;
      }
    }
  } while (pump_again_);
  pumping_ = false;
}

void kvstore_router::resume() {
  checkpointing_ = false;
  pump();
}

behavior kvstore_router::make_behavior() {
  return {
      serve(&kvstore_router::on_init),
      serve(&kvstore_router::on_push),
      serve(&kvstore_router::on_pull),
      serve(&kvstore_router::on_pushpull),
      serve(&kvstore_router::on_pushpull_in_place),
      serve(&kvstore_router::on_broadcast_request),
      serve(&kvstore_router::on_broadcast<kvstore::set_updater>),
      serve(&kvstore_router::on_broadcast<kvstore::set_optimizer>),
      serve(&kvstore_router::on_broadcast<kvstore::set_learning_rate>),
      serve(&kvstore_router::on_broadcast<kvstore::set_gradient_compression>),
      serve(&kvstore_router::on_version),
      serve(&kvstore_router::on_save),
      serve(&kvstore_router::on_load),
      serve(&kvstore_router::on_push_row_sparse),
      serve(&kvstore_router::on_row_sparse_pull),
      serve(&kvstore_router::on_save_optimizer_states),
      serve(&kvstore_router::on_load_optimizer_states),
      [](const kvstore::is_capable& m) -> expected<bool> { return has_capability(m.capability); },
      [this](const kvstore::store_type&) -> std::string {
        if (!options_.type_name.empty()) return options_.type_name;
        return options_.kind == kvstore::kind::local && options_.shard_devices.empty() ? "local" : "device";
      },
  };
}

void kvstore_router::on_exit(const error&) {
  for (const auto& s : shards_) system().stop(s);
}

bool kvstore_router::on_init(kvstore::init& m, response_promise<unit_t>& p, std::uint64_t) {
  auto uses = uses_of(m.values, false);
  if (conflicts(uses)) return false;
  std::optional<bool> kind = int_keys_;
  if (auto r = check_init(m, kind, shape_of(), place_, options_.init_existing); !r) return p.deliver(r.error()), true;
  int_keys_ = kind;
  send_init(m, answer(p));
  return true;
}

void kvstore_router::send_init(const kvstore::init& m, std::function<void(const error*)> done) {
  auto uses = uses_of(m.values, false);
  std::vector<shard_init> parts(shards_.size());
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    if (keys_.contains(m.keys[i])) continue;  // keep_first: the key keeps its value
    const placement& pl = place_key(keys_, m.keys[i], m.values[i].shape(), m.values[i].dtype());
    for (const auto& c : pl.chunks) {
      auto& part = parts[c.shard];
      part.keys.emplace_back(c.sub_key);
      part.values.push_back(slice_ref{m.values[i], c.offset});
      part.lengths.push_back(static_cast<std::int64_t>(c.length));
      part.labels.push_back(m.keys[i]);
    }
  }
  occupy(uses);
  auto g = gather([this, uses, done = std::move(done)](const error* e) {
    release(uses);
    done(e);
    pump();
  });
  for (std::size_t s = 0; s < parts.size(); ++s)
    if (!parts[s].keys.empty()) ask(s, std::move(parts[s]), g);
  g->start();
}

bool kvstore_router::on_broadcast_request(kvstore::broadcast& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin) {
  auto uses = uses_of(m.init.values, false);
  auto writes = uses_of(m.pull.outs, true);
  uses.insert(uses.end(), writes.begin(), writes.end());
  if (conflicts(uses)) return false;
  std::optional<bool> kind = int_keys_;
  if (auto r = check_broadcast(m, kind, shape_of(), place_, options_.init_existing); !r)
    return p.deliver(r.error()), true;
  int_keys_ = kind;
  auto both = gather(answer_with(p, m.pull.outs));
  ++both->waiting;
  send_init(m.init, [both](const error* e) { both->arrive(e); });
  auto j = std::make_shared<job>();
  add_pull_steps(*j, entries(m.pull.keys, m.pull.outs, true), 0, origin, 0);
  ++both->waiting;
  j->done = [both](const error* e) { both->arrive(e); };
  start(std::move(j));
  both->start();
  return true;
}

bool kvstore_router::on_push(kvstore::push& m, response_promise<unit_t>& p, std::uint64_t origin) {
  if (conflicts(uses_of(m.values, false))) return false;
  if (auto r = check_existing("push", "value", m.keys, m.values, int_keys_, shape_of(), place_); !r)
    return p.deliver(r.error()), true;
  if (auto r = count_round("push", m.keys, false); !r) return p.deliver(r.error()), true;
  auto j = std::make_shared<job>();
  j->steps.push_back(make_step(entries(m.keys, m.values, false), m.priority, origin, 0));
  j->done = answer(p);
  start(std::move(j));
  return true;
}

bool kvstore_router::on_pull(kvstore::pull& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin) {
  if (conflicts(uses_of(m.outs, true))) return false;
  if (auto r = check_existing("pull", "output", m.keys, m.outs, int_keys_, shape_of(), place_); !r)
    return p.deliver(r.error()), true;
  auto j = std::make_shared<job>();
  add_pull_steps(*j, entries(m.keys, m.outs, true), m.priority, origin, m.min_version);
  j->done = answer_with(p, std::move(m.outs));
  start(std::move(j));
  return true;
}

bool kvstore_router::on_pushpull(kvstore::pushpull& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin) {
  auto uses = uses_of(m.push.values, false);
  auto writes = uses_of(m.pull.outs, true);
  uses.insert(uses.end(), writes.begin(), writes.end());
  if (conflicts(uses)) return false;
  if (auto r = check_existing("pushpull", "value", m.push.keys, m.push.values, int_keys_, shape_of(), place_); !r)
    return p.deliver(r.error()), true;
  if (auto r = check_existing("pushpull", "output", m.pull.keys, m.pull.outs, int_keys_, shape_of(), place_); !r)
    return p.deliver(r.error()), true;
  if (auto r = count_round("pushpull", m.push.keys, false); !r) return p.deliver(r.error()), true;
  auto pushed = entries(m.push.keys, m.push.values, false);
  auto pulled = entries(m.pull.keys, m.pull.outs, true);
  auto j = std::make_shared<job>();
  const bool synchronous = options_.contributions_per_version > 0;
  std::vector<entry> all = pushed;
  all.insert(all.end(), pulled.begin(), pulled.end());
  if (!synchronous && !crosses_shards(all)) {
    j->steps.push_back(make_step(all, m.priority, origin, 0));
  } else {
    // Every shard reads the values before any writes an output (one store's order), and in
    // synchronous mode the pulls wait for the versions the push contributes to (its replies).
    j->steps.push_back(make_step(pushed, m.priority, origin, 0));
    add_pull_steps(*j, pulled, m.priority, origin, 0);
    for (std::size_t i = 1; i < j->steps.size(); ++i) {
      j->steps[i].pulls_own_rounds = synchronous;
      j->steps[i].waits = synchronous;
    }
    j->holds = !synchronous;
  }
  j->done = answer_with(p, std::move(m.pull.outs));
  start(std::move(j));
  return true;
}

bool kvstore_router::on_version(kvstore::version& m, response_promise<std::uint64_t>& p, std::uint64_t) {
  auto it = keys_.find(m.key);
  if (it == keys_.end())
    return p.deliver(bad("kvstore version: key " + m.key.to_string() + " is not initialised.")), true;
  const chunk& c = it->second.chunks.front();  // every push updates every chunk of a key
  request<std::uint64_t>(shards_[c.shard], shard_timeout, kvstore::version{c.sub_key})
      .then([p](std::uint64_t v) mutable { p.deliver(v); }, [p](const error& e) mutable { p.deliver(e); });
  return true;
}

auto kvstore_router::shape_of() const -> shape_lookup {
  return [this](const kvstore::key& key) -> key_layout {
    auto it = keys_.find(key);
    if (it == keys_.end()) return {};
    return {&it->second.shape, it->second.type};
  };
}

auto kvstore_router::uses_of(const std::vector<tensor>& ts, bool write) -> std::vector<tensor_use> {
  std::vector<tensor_use> uses;
  uses.reserve(ts.size());
  for (const auto& t : ts) uses.push_back({allocation_of(t), write});
  return uses;
}

auto kvstore_router::entries(const std::vector<kvstore::key>& keys, const std::vector<tensor>& ts, bool write) -> std::vector<entry> {
  std::vector<entry> out;
  out.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) out.push_back({keys[i], ts[i], write});
  return out;
}

bool kvstore_router::conflicts(const std::vector<tensor_use>& uses) const {
  if (shards_.size() < 2 || in_use_.empty()) return false;  // one shard orders its requests itself
  for (const auto& u : uses) {
    auto it = in_use_.find(u.allocation);
    if (it != in_use_.end() && (it->second.writers > 0 || (u.write && it->second.readers > 0))) return true;
  }
  return false;
}

void kvstore_router::occupy(const std::vector<tensor_use>& uses) {
  for (const auto& u : uses) {
    auto& c = in_use_[u.allocation];
    ++(u.write ? c.writers : c.readers);
  }
}

void kvstore_router::release(const std::vector<tensor_use>& uses) {
  for (const auto& u : uses) {
    auto it = in_use_.find(u.allocation);
    --(u.write ? it->second.writers : it->second.readers);
    if (it->second.readers == 0 && it->second.writers == 0) in_use_.erase(it);
  }
}

auto kvstore_router::make_step(const std::vector<entry>& es, int priority, std::uint64_t origin, std::uint64_t min_version) const -> step {
  step st;
  st.parts.resize(shards_.size());
  for (auto& part : st.parts) {
    part.priority = priority;
    part.origin = origin;
    part.min_version = min_version;
  }
  for (const auto& e : es) {
    st.uses.push_back({allocation_of(e.t), e.write});
    for (const auto& c : keys_.at(e.key).chunks) {
      auto& part = st.parts[c.shard];
      (e.write ? part.pull_keys : part.push_keys).emplace_back(c.sub_key);
      (e.write ? part.outs : part.values).push_back(slice_ref{e.t, c.offset});
    }
  }
  st.waits = min_version > 0;
  return st;
}

void kvstore_router::start(std::shared_ptr<job> j) {
  if (j->holds) ++steps_holding_;
  send_step(std::move(j));
}

void kvstore_router::send_step(std::shared_ptr<job> j) {
  step& st = j->steps[j->next];
  if (conflicts(st.uses)) {
    stalled_.push_back(std::move(j));
    return;
  }
  if (st.pulls_own_rounds)
    for (auto& part : st.parts) {
      part.pull_versions.resize(part.pull_keys.size(), 0);
      for (std::size_t i = 0; i < part.pull_keys.size(); ++i)
        if (auto it = j->rounds.find(std::get<0>(part.pull_keys[i].value())); it != j->rounds.end())
          part.pull_versions[i] = it->second;
    }
  std::vector<tensor_use> held_uses = st.waits ? std::vector<tensor_use>{} : st.uses;
  occupy(held_uses);
  auto g = gather([this, j, held_uses](const error* e) {
    release(held_uses);
    if (!e && ++j->next < j->steps.size()) {
      send_step(j);
    } else {
      if (j->holds) --steps_holding_;
      j->done(e);
    }
    pump();
  });
  auto send = [&](std::size_t s, auto& part) {
    if (part.push_keys.empty() && part.pull_keys.empty()) return;
    ++g->waiting;
    std::vector<kvstore::key> pushed = part.push_keys;  // the reply has the versions of these keys
    request<std::vector<std::uint64_t>>(shards_[s], shard_timeout, std::move(part))
        .then(
            [g, j, pushed = std::move(pushed)](std::vector<std::uint64_t>& rounds) {
              for (std::size_t i = 0; i < rounds.size() && i < pushed.size(); ++i)
                j->rounds[std::get<0>(pushed[i].value())] = rounds[i];
              g->arrive(nullptr);
            },
            [g](const error& e) { g->arrive(&e); });
  };
  for (std::size_t s = 0; s < st.parts.size(); ++s) send(s, st.parts[s]);
  for (std::size_t s = 0; s < st.sparse_parts.size(); ++s) send(s, st.sparse_parts[s]);
  g->start();
}

}  // namespace strata::kvstore::internal
