// The pipeline section of strata-trace's summary: per stage and per device busy time and the
// measured bubble, from the stages' device tracks or else from the stage actors' handlers
// (docs/trace-tools.md, "Pipeline tags"), as JSON and as text.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "summary_sections.hpp"
#include "text_table.hpp"

namespace strata::trace_tools {

using nlohmann::json;

namespace {

/// Where a stage's device work runs: the device named by its actor's `pipeline.device` tag (one
/// per rank in a merged trace), or, untagged, a device of the stage's own. Ordered: tagged
/// devices by rank and key, then the stages' own devices by stage.
struct device_group {
  bool own = false;          ///< No `pipeline.device` tag: the stage's own device.
  std::int64_t rank = -1;    ///< Tagged, merged trace: the rank of the stage actor.
  std::uint32_t key = 0;     ///< Tagged: (kind << 16) | ordinal.
  std::int64_t stage = -1;   ///< Own: the stage.
  auto order() const { return std::make_tuple(own, rank, key, stage); }
  bool operator<(const device_group& o) const { return order() < o.order(); }
  std::string name() const {
    if (own) return "stage " + std::to_string(stage) + "'s own device";
    return device_key_name(key) + (rank >= 0 ? "@r" + std::to_string(rank) : std::string());
  }
};

/// Sorted copies of slices, for union_length.
std::vector<device_slice> sorted_copy(const std::vector<const device_slice*>& work) {
  std::vector<device_slice> v;
  for (const auto* w : work) v.push_back(*w);
  std::stable_sort(v.begin(), v.end(), [](const device_slice& a, const device_slice& b) { return a.begin < b.begin; });
  return v;
}

/// The stage actors of a trace: by stage (the first one tagged), and by (rank, stage).
struct stage_actors {
  std::map<std::int64_t, const actor_info*> by_stage;
  std::map<std::pair<std::int64_t, std::int64_t>, const actor_info*> by_rank;
  explicit stage_actors(const trace_model& m) {
    for (const auto& [id, a] : m.actors) {
      if (a.pipeline_stage < 0) continue;
      by_stage.try_emplace(a.pipeline_stage, &a);
      by_rank.try_emplace({a.rank, a.pipeline_stage}, &a);
    }
  }
  /// The actor of stage `stage` on `rank` (-1: not a merged trace), else any actor of the stage.
  const actor_info* find(std::int64_t rank, std::int64_t stage) const {
    if (auto it = by_rank.find({rank, stage}); it != by_rank.end()) return it->second;
    auto it = by_stage.find(stage);
    return it == by_stage.end() ? nullptr : it->second;
  }
};

/// The stages' device work, grouped by stage and by the device it runs on.
struct stage_work_groups {
  std::map<std::int64_t, std::vector<const device_slice*>> by_stage;
  std::map<device_group, std::vector<const device_slice*>> by_device;
  std::map<device_group, std::set<std::int64_t>> device_stages;
  std::map<std::int64_t, device_group> stage_device;  // the first device a stage's work was seen on
};

stage_work_groups group_stage_work(const trace_model& m, const stage_actors& actors) {
  stage_work_groups groups;
  for (const auto& [key, slices] : m.streams) {
    const std::int64_t stage = stage_of_device(key.first);
    if (stage < 0) continue;
    const std::int64_t rank = m.device_rank(key.first);
    const actor_info* a = actors.find(rank, stage);
    device_group g;
    if (a != nullptr && a->device_key) {
      g.rank = rank >= 0 ? rank : a->rank;
      g.key = *a->device_key;
    } else {
      g.own = true;
      g.stage = stage;
    }
    groups.stage_device.try_emplace(stage, g);
    groups.device_stages[g].insert(stage);
    for (const auto& s : slices) {
      groups.by_stage[stage].push_back(&s);
      groups.by_device[g].push_back(&s);
    }
  }
  return groups;
}

/// What the stage rows add up: the wall from the first work to the last, the stages' busy time
/// and the highest micro-batch a work item names.
struct stage_totals {
  std::uint64_t wall_begin = UINT64_MAX, wall_end = 0, busy = 0;
  std::int64_t named_max_mb = -1;
};

/// A stage's row: its busy time (the union of its work: streams of one device may overlap), its
/// slices and time per phase, and the device it runs on.
json stage_row(std::int64_t stage, const std::vector<const device_slice*>& work, const stage_work_groups& groups,
               const stage_actors& actors, stage_totals& totals) {
  std::uint64_t count[work_phases] = {};  // by work_phase
  std::vector<const device_slice*> of_phase[work_phases];
  for (const auto* w : work) {
    totals.wall_begin = std::min(totals.wall_begin, w->begin);
    totals.wall_end = std::max(totals.wall_end, w->end);
    totals.named_max_mb = std::max(totals.named_max_mb, w->micro_batch);
    ++count[static_cast<std::size_t>(w->phase)];
    of_phase[static_cast<std::size_t>(w->phase)].push_back(w);
  }
  auto phase_ns = [&](work_phase p) { return union_length(sorted_copy(of_phase[static_cast<std::size_t>(p)])); };
  auto phase_count = [&](work_phase p) { return count[static_cast<std::size_t>(p)]; };
  const std::uint64_t busy = union_length(sorted_copy(work));
  totals.busy += busy;
  auto a = actors.by_stage.find(stage);
  const device_group& g = groups.stage_device.at(stage);
  return {{"stage", stage}, {"actor", a == actors.by_stage.end() ? json("-") : json(a->second->name)},
          {"device", stage_device_base + static_cast<std::uint64_t>(stage)}, {"busy_ns", busy},
          {"forward_slices", phase_count(work_phase::forward)},
          {"backward_slices", phase_count(work_phase::backward)},
          {"weight_slices", phase_count(work_phase::weight)},
          {"other_slices", phase_count(work_phase::update) + phase_count(work_phase::other)},
          {"update_slices", phase_count(work_phase::update)},
          {"forward_ns", phase_ns(work_phase::forward)}, {"backward_ns", phase_ns(work_phase::backward)},
          {"weight_ns", phase_ns(work_phase::weight)}, {"on_device", g.name()},
          {"device_key", g.own ? json(nullptr) : json(g.key)}};
}

/// A row per device: the stages it runs and its busy time (the union of their work: stages
/// sharing it may overlap), which `busy_total` sums.
json device_rows(const stage_work_groups& groups, std::uint64_t& busy_total) {
  json per_device = json::array();
  for (const auto& [g, work] : groups.by_device) {
    const std::uint64_t busy = union_length(sorted_copy(work));
    busy_total += busy;
    json d = {{"device", g.name()}, {"device_key", g.own ? json(nullptr) : json(g.key)},
              {"stages", groups.device_stages.at(g)}, {"busy_ns", busy}};
    if (!g.own && g.rank >= 0) d["rank"] = g.rank;
    per_device.push_back(std::move(d));
  }
  return per_device;
}

/// The pipeline section from the stages' device tracks (docs/trace-tools.md, "Pipeline tags").
/// Stage busy = union of the stage's work; device busy = union of the work of every stage on
/// the device; bubble = 1 - sum(device busy) / (devices x wall).
json pipeline_from_devices(const trace_model& m, const stage_actors& actors, std::int64_t tagged_max_mb) {
  const stage_work_groups groups = group_stage_work(m, actors);
  stage_totals totals;
  json per_stage = json::array();
  for (const auto& [stage, work] : groups.by_stage) per_stage.push_back(stage_row(stage, work, groups, actors, totals));
  const std::uint64_t wall = totals.wall_end > totals.wall_begin ? totals.wall_end - totals.wall_begin : 0;
  std::uint64_t device_busy_total = 0;
  json per_device = device_rows(groups, device_busy_total);
  const std::size_t devices = groups.by_device.size();
  const std::size_t stages = groups.by_stage.size();
  json p;
  p["stages"] = stages;
  if (tagged_max_mb >= 0) {
    p["micro_batches"] = tagged_max_mb + 1;
    p["micro_batches_from"] = "handler tags";
  } else if (totals.named_max_mb >= 0) {
    p["micro_batches"] = totals.named_max_mb + 1;
    p["micro_batches_from"] = "device work names";
  } else {
    p["micro_batches"] = nullptr;
    p["micro_batches_from"] = nullptr;
  }
  p["source"] = "device";
  p["counted_slices"] = "device work on the stages' device tracks (device 1000000000 + stage)";
  p["wall_ns"] = wall;
  p["busy_ns"] = totals.busy;
  p["devices"] = devices;
  p["device_busy_ns"] = device_busy_total;
  p["bubble_denominator"] = std::to_string(stages) + " stages on " + std::to_string(devices) +
                            (devices == 1 ? " device" : " devices");
  p["bubble"] = wall > 0 && devices > 0
                    ? 1.0 - static_cast<double>(device_busy_total) / (static_cast<double>(devices) * static_cast<double>(wall))
                    : 0.0;
  p["ideal_bubble"] = m.ideal_bubble ? json(*m.ideal_bubble) : json(nullptr);
  p["per_stage"] = std::move(per_stage);
  p["per_device"] = std::move(per_device);
  return p;
}

/// The pipeline section from the stage actors' handler slices (traces without stage device
/// tracks): the tagged forward/backward slices, or all of them when none is tagged.
json pipeline_from_handlers(const trace_model& m, const stage_actors& actors, std::int64_t tagged_max_mb) {
  const bool tagged = tagged_max_mb >= 0;
  std::uint64_t wall_begin = UINT64_MAX, wall_end = 0, busy_total = 0;
  std::int64_t max_mb = -1;
  json per_stage = json::array();
  for (const auto& [stage, a] : actors.by_stage) {
    std::uint64_t busy = 0, fwd = 0, bwd = 0;
    for (const auto& s : a->slices) {
      if (tagged && s.phase == pipeline_phase::none) continue;
      wall_begin = std::min(wall_begin, s.begin);
      wall_end = std::max(wall_end, s.end);
      busy += s.end - s.begin;
      fwd += s.phase == pipeline_phase::forward;
      bwd += s.phase == pipeline_phase::backward;
      max_mb = std::max(max_mb, s.micro_batch);
    }
    busy_total += busy;
    per_stage.push_back({{"stage", a->pipeline_stage}, {"actor", a->name}, {"busy_ns", busy},
                         {"forward_slices", fwd}, {"backward_slices", bwd}});
  }
  std::uint64_t wall = wall_end > wall_begin ? wall_end - wall_begin : 0;
  json p;
  p["stages"] = actors.by_stage.size();
  p["micro_batches"] = max_mb + 1;
  p["source"] = "handlers";
  p["counted_slices"] = tagged ? "tagged forward/backward handler slices" : "all handler slices of stage actors";
  p["wall_ns"] = wall;
  p["busy_ns"] = busy_total;
  p["bubble"] = wall > 0 ? 1.0 - static_cast<double>(busy_total) /
                                     (static_cast<double>(actors.by_stage.size()) * static_cast<double>(wall))
                         : 0.0;
  p["ideal_bubble"] = m.ideal_bubble ? json(*m.ideal_bubble) : json(nullptr);
  p["per_stage"] = std::move(per_stage);
  return p;
}

/// "0, 2, 5".
std::string joined(const json& numbers) {
  std::string s;
  for (const auto& n : numbers) s += (s.empty() ? "" : ", ") + std::to_string(n.get<std::int64_t>());
  return s;
}

}  // namespace

/// The pipeline bubble (null without stage tags or stage device tracks). Stage busy is the
/// device time of the stage's device track when the trace has one for every tagged stage
/// (device work stamped with its real start and end), else the handler time of the stage actors.
json pipeline_json(const trace_model& m) {
  const stage_actors actors(m);
  std::set<std::int64_t> stages_with_work;
  for (const auto& [key, slices] : m.streams)
    if (const std::int64_t stage = stage_of_device(key.first); stage >= 0) stages_with_work.insert(stage);
  bool device_path = !stages_with_work.empty();
  for (const auto& [stage, a] : actors.by_stage) device_path &= stages_with_work.count(stage) != 0;
  std::int64_t tagged_max_mb = -1;
  for (const auto& [stage, a] : actors.by_stage)
    for (const auto& s : a->slices)
      if (s.phase != pipeline_phase::none) tagged_max_mb = std::max(tagged_max_mb, s.micro_batch);
  if (device_path) return pipeline_from_devices(m, actors, tagged_max_mb);
  if (actors.by_stage.empty()) return nullptr;
  return pipeline_from_handlers(m, actors, tagged_max_mb);
}

/// The pipeline section of the text summary: one line of figures, the devices that stages
/// share (when some do), and a row per stage.
void print_pipeline(const json& p, std::ostream& out) {
  const bool from_device = p.value("source", "handlers") == "device";
  out << "\npipeline: " << p["stages"] << " stages, ";
  if (!p["micro_batches"].is_null()) out << p["micro_batches"] << " micro-batches, ";
  out << "wall " << format_ns(p["wall_ns"]) << ", measured bubble " << format_fixed(100.0 * p["bubble"].get<double>(), 1)
      << " %";
  if (!p["ideal_bubble"].is_null())
    out << " (schedule's ideal " << format_fixed(100.0 * p["ideal_bubble"].get<double>(), 1) << " %)";
  out << (from_device ? "; busy = device work of each stage's device track" : "; busy = stage actors' handler time");
  if (p.contains("bubble_denominator")) out << "; " << p["bubble_denominator"].get<std::string>();
  out << "\n";
  bool shared = false, weight = false;
  if (p.contains("per_device"))
    for (const auto& d : p["per_device"]) shared |= d["stages"].size() > 1;
  for (const auto& st : p["per_stage"]) weight |= st.value("weight_slices", std::uint64_t{0}) > 0;
  if (shared) {
    out << "  shared devices (busy = union of their stages' work; bubble = 1 - device busy / (" << p["devices"]
        << " devices x wall)):";
    const char* sep = " ";
    for (const auto& d : p["per_device"]) {
      out << sep << d["device"].get<std::string>() << " runs stages " << joined(d["stages"]) << ", busy "
          << format_ns(d["busy_ns"]);
      sep = "; ";
    }
    out << "\n";
  }
  std::vector<std::string> header{"stage", "actor"};
  if (from_device) header.push_back("device");
  for (const char* h : {"busy", "forward", "backward"}) header.push_back(h);
  if (from_device) {
    if (weight) header.push_back("weight");
    for (const char* h : {"other", "forward time", "backward time"}) header.push_back(h);
    if (weight) header.push_back("weight time");
    header.push_back("runs on");
  }
  text_table t(header);
  for (const auto& st : p["per_stage"]) {
    std::vector<std::string> row{std::to_string(st["stage"].get<std::int64_t>()), st["actor"].get<std::string>()};
    if (from_device) row.push_back(std::to_string(st["device"].get<std::uint64_t>()));
    row.push_back(format_ns(st["busy_ns"]));
    row.push_back(std::to_string(st["forward_slices"].get<std::uint64_t>()));
    row.push_back(std::to_string(st["backward_slices"].get<std::uint64_t>()));
    if (from_device) {
      if (weight) row.push_back(std::to_string(st["weight_slices"].get<std::uint64_t>()));
      row.push_back(std::to_string(st["other_slices"].get<std::uint64_t>()));
      row.push_back(format_ns(st["forward_ns"]));
      row.push_back(format_ns(st["backward_ns"]));
      if (weight) row.push_back(format_ns(st["weight_ns"]));
      row.push_back(st["on_device"].get<std::string>());
    }
    t.add(std::move(row));
  }
  t.print(out);
}

}  // namespace strata::trace_tools
