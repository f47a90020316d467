#include "router.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "checkpoint_file.hpp"
#include "merge.hpp"
#include "shard_protocol.hpp"
#include "strata/actor.hpp"

namespace strata::kvstore::internal {

namespace {

/// Takes the public messages, checks each request whole against the caller's keys, and sends its
/// parts to the shards (one message per shard and request), answering once all have answered.
/// Keys are spread round robin over the shards in init order; a key of more than `chunk_bytes`
/// becomes contiguous chunks on consecutive shards. Each chunk is a key of its own on its shard
/// (an integer the router assigns), read and written in place through `slice_ref`s.
///
/// Checkpoints: a save gathers every shard's snapshot (a barrier on each shard) and writes the
/// caller's keys, chunks joined, in one store's format; a load checks the whole file, then stages
/// each shard's part and commits on every shard only when all have staged it. While a save or
/// load is in progress the router holds the requests that arrive and serves them afterwards.
class kvstore_router final : public actor {
public:
  kvstore_router(kvstore::options options, std::vector<actor_ref> shards, store_place place)
      : options_(std::move(options)), shards_(std::move(shards)), place_(std::move(place)) {}

private:
  /// A handler of a public request: `body(m, p, sender id)` runs now or, during a checkpoint,
  /// once it is over (in arrival order).
  template <class R, class M>
  auto serve(void (kvstore_router::*body)(M&, response_promise<R>&, std::uint64_t)) {
    return [this, body](M& m) -> expected<R> {
      auto p = make_response_promise<R>();
      const auto origin = current_sender().id();
      if (!checkpointing_) (this->*body)(m, p, origin);
      else held_.push_back([this, body, m = std::move(m), p, origin]() mutable { (this->*body)(m, p, origin); });
      return R{};
    };
  }
  /// Ends a checkpoint: serves the requests held meanwhile, until one starts another checkpoint.
  void resume() {
    checkpointing_ = false;
    while (!checkpointing_ && !held_.empty()) {
      auto next = std::move(held_.front());
      held_.pop_front();
      next();
    }
  }

public:
  behavior make_behavior() override {
    return {
        serve(&kvstore_router::on_init),
        serve(&kvstore_router::on_push),
        serve(&kvstore_router::on_pull),
        serve(&kvstore_router::on_pushpull),
        serve(&kvstore_router::on_broadcast<kvstore::set_updater>),
        serve(&kvstore_router::on_broadcast<kvstore::set_optimizer>),
        serve(&kvstore_router::on_version),
        serve(&kvstore_router::on_save),
        serve(&kvstore_router::on_load),
    };
  }

  void on_exit(const error&) override {
    for (const auto& s : shards_) system().stop(s);
  }

private:
  /// Shard requests may wait for a version (synchronous mode) as long as the caller's own timeout.
  static constexpr std::chrono::hours shard_timeout{24};

  struct chunk {
    std::size_t shard = 0;
    std::int64_t sub_key = 0;
    std::size_t offset = 0;  // first element of the caller's tensor
    std::size_t length = 0;
  };
  struct placement {
    std::vector<std::int64_t> shape;
    std::vector<chunk> chunks;
  };
  using placements = std::map<kvstore::key, placement>;

  void on_init(kvstore::init& m, response_promise<unit_t>& p, std::uint64_t) {
    std::optional<bool> kind = int_keys_;
    if (auto r = check_init(m, kind, shape_of(), place_); !r) return p.deliver(r.error());
    int_keys_ = kind;
    std::vector<shard_init> parts(shards_.size());
    for (std::size_t i = 0; i < m.keys.size(); ++i) {
      const placement& pl = place_key(keys_, m.keys[i], m.values[i].shape());
      for (const auto& c : pl.chunks) {
        auto& part = parts[c.shard];
        part.keys.emplace_back(c.sub_key);
        part.values.push_back(slice_ref{m.values[i], c.offset});
        part.lengths.push_back(static_cast<std::int64_t>(c.length));
        part.labels.push_back(m.keys[i]);
      }
    }
    auto g = gather(answer(p));
    for (std::size_t s = 0; s < parts.size(); ++s)
      if (!parts[s].keys.empty()) ask(s, std::move(parts[s]), g);
    g->start();
  }
  void on_push(kvstore::push& m, response_promise<unit_t>& p, std::uint64_t origin) {
    if (auto r = check_existing("push", "value", m.keys, m.values, int_keys_, shape_of(), place_); !r)
      return p.deliver(r.error());
    auto parts = requests(m.priority, origin);
    add_values(parts, m.keys, m.values);
    send_parts(std::move(parts), answer(p));
  }
  void on_pull(kvstore::pull& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin) {
    if (auto r = check_existing("pull", "output", m.keys, m.outs, int_keys_, shape_of(), place_); !r)
      return p.deliver(r.error());
    auto parts = requests(m.priority, origin);
    for (auto& part : parts) part.min_version = m.min_version;
    add_outs(parts, m.keys, m.outs);
    send_parts(std::move(parts), answer_with(p, std::move(m.outs)));
  }
  void on_pushpull(kvstore::pushpull& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin) {
    if (auto r = check_existing("pushpull", "value", m.push.keys, m.push.values, int_keys_, shape_of(), place_); !r)
      return p.deliver(r.error());
    if (auto r = check_existing("pushpull", "output", m.pull.keys, m.pull.outs, int_keys_, shape_of(), place_); !r)
      return p.deliver(r.error());
    auto parts = requests(m.priority, origin);
    add_values(parts, m.push.keys, m.push.values);
    add_outs(parts, m.pull.keys, m.pull.outs);
    send_parts(std::move(parts), answer_with(p, std::move(m.pull.outs)));
  }
  template <class M>
  void on_broadcast(M& m, response_promise<unit_t>& p, std::uint64_t) {
    auto g = gather(answer(p));
    for (std::size_t s = 0; s < shards_.size(); ++s) ask(s, m, g);
    g->start();
  }
  void on_version(kvstore::version& m, response_promise<std::uint64_t>& p, std::uint64_t) {
    auto it = keys_.find(m.key);
    if (it == keys_.end()) return p.deliver(bad("kvstore version: key " + m.key.to_string() + " is not initialised."));
    const chunk& c = it->second.chunks.front();  // every push updates every chunk of a key
    request<std::uint64_t>(shards_[c.shard], shard_timeout, kvstore::version{c.sub_key})
        .then([p](std::uint64_t v) mutable { p.deliver(v); }, [p](const error& e) mutable { p.deliver(e); });
  }

  /// Every shard's snapshot (chunk keys), joined into the caller's keys and written as one store would.
  void on_save(kvstore::save& m, response_promise<unit_t>& p, std::uint64_t) {
    checkpointing_ = true;
    auto taken = std::make_shared<std::map<std::int64_t, checkpoint_entry>>();  // by chunk key
    auto g = gather([this, p, taken, path = m.path](const error* e) mutable {
      auto written = e ? expected<void>(*e) : guarded("save", [&] { return write_checkpoint(path, join(*taken)); });
      written ? p.deliver(unit) : p.deliver(written.error());
      resume();
    });
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      ++g->waiting;
      request<std::vector<checkpoint_entry>>(shards_[s], shard_timeout, shard_save{})
          .then(
              [g, taken](std::vector<checkpoint_entry>& part) {
                for (auto& e : part) taken->emplace(std::get<0>(e.key.value()), std::move(e));
                g->arrive(nullptr);
              },
              [g](const error& e) { g->arrive(&e); });
    }
    g->start();
  }
  std::vector<checkpoint_entry> join(const std::map<std::int64_t, checkpoint_entry>& taken) const {
    std::vector<checkpoint_entry> entries;
    for (const auto& [key, pl] : keys_) {
      const checkpoint_entry& first = taken.at(pl.chunks.front().sub_key);
      auto& e = entries.emplace_back(checkpoint_entry{key, first.version, first.step, pl.shape, {}});
      e.arrays.resize(first.arrays.size());
      for (const auto& c : pl.chunks)
        for (std::size_t a = 0; a < e.arrays.size(); ++a) {
          const auto& part = taken.at(c.sub_key).arrays.at(a);
          e.arrays[a].insert(e.arrays[a].end(), part.begin(), part.end());
        }
    }
    return entries;
  }

  /// Checks the whole file, places its keys afresh over the shards, has every shard stage its
  /// part, then commits on all of them, or, when one failed, drops the staged parts everywhere.
  void on_load(kvstore::load& m, response_promise<unit_t>& p, std::uint64_t) {
    auto file = read_checkpoint(m.path);
    if (!file) return p.deliver(file.error());
    auto entries = std::make_shared<const std::vector<checkpoint_entry>>(std::move(file->entries));
    placements loaded;
    std::vector<shard_load> parts(shards_.size(), shard_load{entries, {}});
    for (std::size_t i = 0; i < entries->size(); ++i) {
      const auto& e = (*entries)[i];
      for (const auto& c : place_key(loaded, e.key, e.shape).chunks)
        parts[c.shard].pieces.push_back({c.sub_key, e.key, i, c.offset, {static_cast<std::int64_t>(c.length)}});
    }
    checkpointing_ = true;
    auto g = gather([this, p, loaded = std::move(loaded), kind = file->int_keys](const error* e) mutable {
      for (const auto& s : shards_) send(s, shard_commit{.keep = e == nullptr});
      if (!e) {
        keys_ = std::move(loaded);
        int_keys_ = kind;
      }
      e ? p.deliver(*e) : p.deliver(unit);
      resume();
    });
    for (std::size_t s = 0; s < shards_.size(); ++s) ask(s, std::move(parts[s]), g);
    g->start();
  }

  /// Counts the shards' answers; `done` runs once with the first failure (or null).
  struct gathering {
    std::size_t waiting = 1;  // 1 until start(), so that answers cannot finish it early
    std::optional<error> failure;
    std::function<void(const error*)> done;
    void arrive(const error* e) {
      if (e && !failure) failure = *e;
      if (--waiting == 0) done(failure ? &*failure : nullptr);
    }
    void start() { arrive(nullptr); }
  };
  static std::shared_ptr<gathering> gather(std::function<void(const error*)> done) {
    auto g = std::make_shared<gathering>();
    g->done = std::move(done);
    return g;
  }
  template <class M>
  void ask(std::size_t shard, M msg, const std::shared_ptr<gathering>& g) {
    ++g->waiting;
    request<void>(shards_[shard], shard_timeout, std::move(msg))
        .then([g] { g->arrive(nullptr); }, [g](const error& e) { g->arrive(&e); });
  }

  static std::function<void(const error*)> answer(response_promise<unit_t> p) {
    return [p](const error* e) mutable { e ? p.deliver(*e) : p.deliver(unit); };
  }
  static std::function<void(const error*)> answer_with(response_promise<std::vector<tensor>> p,
                                                       std::vector<tensor> outs) {
    return [p, outs = std::move(outs)](const error* e) mutable {
      if (e) return p.deliver(*e);
      for (auto& out : outs) out.set_ready_event(event{});  // every shard's copy has completed
      p.deliver(std::move(outs));
    };
  }

  shape_lookup shape_of() const {
    return [this](const kvstore::key& key) -> const std::vector<std::int64_t>* {
      auto it = keys_.find(key);
      return it == keys_.end() ? nullptr : &it->second.shape;
    };
  }

  /// Places `key` in `into`: its chunks on the next shards, under new chunk keys.
  const placement& place_key(placements& into, const kvstore::key& key, const std::vector<std::int64_t>& shape) {
    std::size_t numel = 1;
    for (auto d : shape) numel *= static_cast<std::size_t>(d);
    const std::size_t bytes = numel * sizeof(float);
    std::size_t pieces = 1;
    if (options_.chunk_bytes > 0 && bytes > options_.chunk_bytes)
      pieces = std::min(numel, (bytes + options_.chunk_bytes - 1) / options_.chunk_bytes);
    placement pl{shape, {}};
    std::size_t offset = 0;
    for (std::size_t c = 0; c < pieces; ++c) {
      const std::size_t length = numel / pieces + (c < numel % pieces ? 1 : 0);
      pl.chunks.push_back(chunk{next_shard_ % shards_.size(), next_sub_key_++, offset, length});
      ++next_shard_;
      offset += length;
    }
    return into.emplace(key, std::move(pl)).first->second;
  }

  std::vector<shard_request> requests(int priority, std::uint64_t origin) const {
    std::vector<shard_request> parts(shards_.size());
    for (auto& part : parts) {
      part.priority = priority;
      part.origin = origin;
    }
    return parts;
  }
  void add_values(std::vector<shard_request>& parts, const std::vector<kvstore::key>& keys,
                  const std::vector<tensor>& values) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      for (const auto& c : keys_.at(keys[i]).chunks) {
        parts[c.shard].push_keys.emplace_back(c.sub_key);
        parts[c.shard].values.push_back(slice_ref{values[i], c.offset});
      }
  }
  void add_outs(std::vector<shard_request>& parts, const std::vector<kvstore::key>& keys,
                const std::vector<tensor>& outs) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      for (const auto& c : keys_.at(keys[i]).chunks) {
        parts[c.shard].pull_keys.emplace_back(c.sub_key);
        parts[c.shard].outs.push_back(slice_ref{outs[i], c.offset});
      }
  }
  void send_parts(std::vector<shard_request> parts, std::function<void(const error*)> done) {
    auto g = gather(std::move(done));
    for (std::size_t s = 0; s < parts.size(); ++s)
      if (!parts[s].push_keys.empty() || !parts[s].pull_keys.empty()) ask(s, std::move(parts[s]), g);
    g->start();
  }
  kvstore::options options_;
  std::vector<actor_ref> shards_;
  store_place place_;
  placements keys_;
  std::optional<bool> int_keys_;
  bool checkpointing_ = false;              // a save or load is in progress
  std::deque<std::function<void()>> held_;  // requests that arrived meanwhile
  std::int64_t next_sub_key_ = 0;
  std::size_t next_shard_ = 0;
};


}  // namespace

actor_ref spawn_router(actor_system& system, kvstore::options options, std::vector<actor_ref> shards,
                       store_place place) {
  auto name = options.name;
  return system.spawn_with<kvstore_router>(spawn_options{.name = std::move(name)}, std::move(options), std::move(shards),
                                           std::move(place));
}

}  // namespace strata::kvstore::internal
