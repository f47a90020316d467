#include "router_actor.hpp"

// A sharded store's router: its spawn, placement of keys, the check for shards sharing a caller
// tensor, saves, loads and optimizer states (the class is in router_actor.hpp, its request handling
// in router_actor.cpp; row-sparse requests in router_sparse.cpp).
namespace strata::kvstore::internal {

actor_ref spawn_router(actor_system& system, kvstore::options options, std::vector<actor_ref> shards,
                       store_place place) {
  auto name = options.name;
  return system.spawn_with<kvstore_router>(spawn_options{.name = std::move(name)}, std::move(options), std::move(shards),
                                           std::move(place));
}

const kvstore_router::placement& kvstore_router::place_key(placements& into, const kvstore::key& key,
                                                          const std::vector<std::int64_t>& shape, strata::dtype type) {
  std::size_t numel = 1;
  for (auto d : shape) numel *= static_cast<std::size_t>(d);
  const std::size_t bytes = numel * size_of(type);
  std::size_t pieces = 1;
  if (options_.chunk_bytes > 0 && bytes > options_.chunk_bytes)
    pieces = std::min(numel, (bytes + options_.chunk_bytes - 1) / options_.chunk_bytes);
  placement pl{shape, type, {}};
  std::size_t offset = 0;
  for (std::size_t c = 0; c < pieces; ++c) {
    const std::size_t length = numel / pieces + (c < numel % pieces ? 1 : 0);
    pl.chunks.push_back(chunk{next_shard_ % shards_.size(), next_sub_key_++, offset, length});
    ++next_shard_;
    offset += length;
  }
  return into.emplace(key, std::move(pl)).first->second;
}

/// True when elements of one caller tensor are written by one shard and read or written by
/// another, so that the shards' accesses need an order. O(n log n) in the chunks named.
bool kvstore_router::crosses_shards(const std::vector<entry>& es) const {
  if (shards_.size() < 2) return false;
  struct range {
    const void* allocation;
    std::size_t begin, end, shard;
    bool write;
  };
  std::vector<range> ranges;
  bool any_write = false;
  for (const auto& e : es) {
    any_write = any_write || e.write;
    for (const auto& c : keys_.at(e.key).chunks)
      ranges.push_back({allocation_of(e.t), c.offset, c.offset + c.length, c.shard, e.write});
  }
  if (!any_write) return false;
  std::sort(ranges.begin(), ranges.end(), [](const range& a, const range& b) {
    return a.allocation != b.allocation ? std::less<const void*>{}(a.allocation, b.allocation) : a.begin < b.begin;
  });
  // Sorted by start, a range overlaps an earlier one exactly when that one ends after its start:
  // the largest end seen on any shard but its own says whether one does.
  struct largest_ends {
    std::size_t end = 0, shard = static_cast<std::size_t>(-1), other_end = 0;  // other_end: largest end on another shard than `shard`
    void add(std::size_t e, std::size_t s) {
      if (s == shard) end = std::max(end, e);
      else if (e > end) other_end = std::exchange(end, e), shard = s;
      else other_end = std::max(other_end, e);
    }
    std::size_t beside(std::size_t s) const { return s == shard ? other_end : end; }
  };
  largest_ends all, written;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const range& r = ranges[i];
    if (i > 0 && ranges[i - 1].allocation != r.allocation) all = written = largest_ends{};
    if ((r.write ? all : written).beside(r.shard) > r.begin) return true;
    all.add(r.end, r.shard);
    if (r.write) written.add(r.end, r.shard);
  }
  return false;
}

/// Every shard's snapshot (chunk keys), joined into the caller's keys and written as one store would.
bool kvstore_router::on_save(kvstore::save& m, response_promise<unit_t>& p, std::uint64_t) {
  gather_snapshots([path = m.path](std::vector<checkpoint_entry> entries) {
    return guarded("save", [&] { return write_checkpoint(path, entries); });
  }, p);
  return true;
}

bool kvstore_router::on_save_optimizer_states(kvstore::save_optimizer_states& m, response_promise<unit_t>& p, std::uint64_t) {
  if (!optimizer_) return p.deliver(bad(no_optimizer_to_save)), true;
  gather_snapshots([path = m.path, setting = *optimizer_](std::vector<checkpoint_entry> entries) {
    return guarded("save_optimizer_states", [&] { return write_optimizer_states(path, setting, std::move(entries)); });
  }, p);
  return true;
}

/// The file is checked whole against the keys first; then every shard installs the optimizer and
/// the states of its chunks.
bool kvstore_router::on_load_optimizer_states(kvstore::load_optimizer_states& m, response_promise<unit_t>& p, std::uint64_t) {
  auto file = read_optimizer_states(m.path, shape_of());
  if (!file) return p.deliver(file.error()), true;
  auto entries = std::make_shared<const std::vector<checkpoint_entry>>(std::move(file->entries));
  std::vector<shard_load_optimizer_states> parts(shards_.size(), shard_load_optimizer_states{file->setting, entries, {}});
  for (std::size_t i = 0; i < entries->size(); ++i)
    for (const auto& c : keys_.at((*entries)[i].key).chunks)
      parts[c.shard].pieces.push_back({c.sub_key, (*entries)[i].key, i, c.offset, {static_cast<std::int64_t>(c.length)}});
  optimizer_ = file->setting;
  auto g = gather(answer(p));
  for (std::size_t s = 0; s < shards_.size(); ++s) ask(s, std::move(parts[s]), g);
  g->start();
  return true;
}

/// Takes every shard's snapshot, joins them into the caller's keys and hands them to `write`.
void kvstore_router::gather_snapshots(std::function<expected<void>(std::vector<checkpoint_entry>)> write, response_promise<unit_t> p) {
  checkpointing_ = true;
  auto taken = std::make_shared<std::map<std::int64_t, checkpoint_entry>>();  // by chunk key
  auto g = gather([this, p, taken, write = std::move(write)](const error* e) mutable {
    auto written = e ? expected<void>(*e) : write(join(*taken));
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

std::vector<checkpoint_entry> kvstore_router::join(const std::map<std::int64_t, checkpoint_entry>& taken) const {
  std::vector<checkpoint_entry> entries;
  for (const auto& [key, pl] : keys_) {
    const checkpoint_entry& first = taken.at(pl.chunks.front().sub_key);
    auto& e = entries.emplace_back(checkpoint_entry{key, first.version, first.step, pl.shape, {}});
    e.type = pl.type;
    e.arrays.resize(first.arrays.size());
    for (const auto& c : pl.chunks) {
      const checkpoint_entry& part = taken.at(c.sub_key);
      for (std::size_t a = 0; a < e.arrays.size(); ++a)
        e.arrays[a].insert(e.arrays[a].end(), part.arrays.at(a).begin(), part.arrays.at(a).end());
      e.master.insert(e.master.end(), part.master.begin(), part.master.end());  // every chunk has one, or none
    }
  }
  return entries;
}

/// Checks the whole file, places its keys afresh over the shards, has every shard stage its
/// part, then commits on all of them, or, when one failed, drops the staged parts everywhere.
bool kvstore_router::on_load(kvstore::load& m, response_promise<unit_t>& p, std::uint64_t) {
  auto file = read_checkpoint(m.path);
  if (!file) return p.deliver(file.error()), true;
  auto entries = std::make_shared<const std::vector<checkpoint_entry>>(std::move(file->entries));
  placements loaded;
  std::vector<shard_load> parts(shards_.size(), shard_load{entries, {}});
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const auto& e = (*entries)[i];
    for (const auto& c : place_key(loaded, e.key, e.shape, e.type).chunks)
      parts[c.shard].pieces.push_back({c.sub_key, e.key, i, c.offset, {static_cast<std::int64_t>(c.length)}});
  }
  checkpointing_ = true;
  auto g = gather([this, p, loaded = std::move(loaded), kind = file->int_keys](const error* e) mutable {
    for (const auto& s : shards_) send(s, shard_commit{.keep = e == nullptr});
    if (!e) {
      keys_ = std::move(loaded);
      int_keys_ = kind;
      rounds_.clear();  // the shards' keys start afresh: nothing accumulated
    }
    e ? p.deliver(*e) : p.deliver(unit);
    resume();
  });
  for (std::size_t s = 0; s < shards_.size(); ++s) ask(s, std::move(parts[s]), g);
  g->start();
  return true;
}

}  // namespace strata::kvstore::internal
