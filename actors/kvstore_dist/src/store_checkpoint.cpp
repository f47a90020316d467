// The worker's side of a distributed store's checkpoint: save and load, collectives of every rank.

#include <algorithm>
#include <map>
#include <utility>

#include "worker.hpp"

namespace strata::kvstore_dist {

using detail::all_ok;
using detail::done;
using detail::home_of;

namespace {

std::string part_path(const std::string& path, int rank, int world) {
  return path + ".part" + std::to_string(rank) + "of" + std::to_string(world);
}

}  // namespace

expected<void> store::save(const std::string& path) {
  auto& w = *state_;
  expected<void> mine;
  if (w.replica) {
    // Every replica holds every key alike: rank 0's is the checkpoint.
    if (w.rank == 0) {
      auto got = w.replica->save(path).get();
      if (!got) mine = got.error();
    }
  } else {
    mine = done(ask<unit_t>(w, w.server, detail::save_msg{part_path(path, w.rank, w.world)}));
    if (all_ok(w, static_cast<bool>(mine)) && w.rank == 0) {
      // Rank 0 joins the parts into one file: the commit of the whole save.
      // A split key's parts come from ranks 0, 1, ... in part order and become one entry.
      std::vector<kvstore::checkpoint_entry> entries;
      std::map<kvstore::key, std::vector<kvstore::checkpoint_entry>> parts;
      for (int r = 0; r < w.world && mine; ++r) {
        auto part = kvstore::read_checkpoint(part_path(path, r, w.world));
        if (!part) {
          mine = part.error();
          break;
        }
        for (auto& e : part->entries)
          (w.splits.count(e.key) != 0 ? parts[e.key] : entries).push_back(std::move(e));
      }
      for (auto& [key, got] : parts) {
        const auto& layout = w.splits.at(key);
        if (!mine) break;
        if (static_cast<int>(got.size()) != layout.parts())
          mine = error(errc::runtime_failure, "kvstore dist save of \"" + path + "\": the shards hold " +
                                                  std::to_string(got.size()) + " of the " + std::to_string(layout.parts()) +
                                                  " parts of key " + key.to_string() + "; the file was not written.");
        else
          entries.push_back(detail::join_parts(std::move(got), layout));
      }
      if (mine) {
        std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
        mine = kvstore::write_checkpoint(path, entries);
      }
    }
  }
  const bool everyone = all_ok(w, static_cast<bool>(mine));
  if (!w.replica) std::remove(part_path(path, w.rank, w.world).c_str());
  if (!mine) return mine;
  if (!everyone)
    return error(errc::runtime_failure, "kvstore dist save of \"" + path + "\": another rank failed; the file was not written.");
  return {};
}

expected<void> store::load(const std::string& path) {
  auto& w = *state_;
  auto file = kvstore::read_checkpoint(path);
  const bool read_everywhere = all_ok(w, static_cast<bool>(file));
  if (!file) return file.error();
  if (!read_everywhere)
    return error(errc::runtime_failure, "kvstore dist load of \"" + path + "\": another rank could not read it; nothing changed.");
  // Every rank reads the same file, so every rank refuses alike.
  if (w.replica)
    for (const auto& e : file->entries)
      if (e.type != dtype::float32)
        return error(errc::invalid_argument, "kvstore dist load of \"" + path + "\": key " + e.key.to_string() + " is " +
                                                 std::string(to_string(e.type)) +
                                                 ", and dist_sync_allreduce keeps float32 keys only; nothing changed.");
  expected<void> mine;
  if (w.replica) {
    auto got = w.replica->load(path).get();
    if (!got) mine = got.error();
    else {
      w.shapes.clear();
      for (const auto& e : file->entries) w.shapes[e.key] = e.shape;
    }
  } else {
    // This rank's keys (by today's placement) go to its shard through a file of their own.
    std::vector<kvstore::checkpoint_entry> owned;
    std::vector<detail::loaded_key> keys;
    std::map<kvstore::key, std::uint64_t> versions;
    std::map<kvstore::key, dtype> types;
    for (const auto& e : file->entries) {
      versions[e.key] = e.version;
      types[e.key] = e.type;
    }
    // Keys larger than today's bound are cut for today's ranks, whatever cut them when saved.
    std::map<kvstore::key, detail::split_layout> splits;
    for (auto& e : file->entries) {
      if (auto layout = detail::split_of(e.shape, w.options.big_array_bound, w.world)) {
        if (w.rank < layout->parts()) {
          owned.push_back(detail::cut_part(e, *layout, w.rank));
          keys.push_back(detail::loaded_key{e.key, owned.back().shape, e.version, e.type});
        }
        splits[e.key] = std::move(*layout);
        continue;
      }
      if (home_of(e.key, w.world) != w.rank) continue;
      keys.push_back(detail::loaded_key{e.key, e.shape, e.version, e.type});
      owned.push_back(std::move(e));
    }
    const std::string mine_path = path + ".load" + std::to_string(w.rank);
    mine = kvstore::write_checkpoint(mine_path, owned);
    if (mine) mine = done(ask<unit_t>(w, w.server, detail::load_msg{mine_path, std::move(keys)}));
    std::remove(mine_path.c_str());
    if (mine) {
      w.known.clear();
      for (const auto& [key, version] : versions) w.known.insert(key);
      w.types = std::move(types);
      w.pushes = std::move(versions);
      w.splits = std::move(splits);
      w.residuals.clear();  // the keys start again from the file's values
    }
  }
  const bool everyone = all_ok(w, static_cast<bool>(mine));
  if (!mine) return mine;
  if (!everyone) return error(errc::runtime_failure, "kvstore dist load of \"" + path + "\": another rank failed to load its keys.");
  return {};
}

}  // namespace strata::kvstore_dist
