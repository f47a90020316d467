// The SVG timeline's rows and colours: a hue per message type or work name (by first
// appearance), the pipeline's forward and backward work in shades by micro-batch, and the legend
// that names them.
#include "timeline_rows.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "trace_views.hpp"

namespace strata::trace_tools {

namespace {

// Tableau 10 plus two: distinct on white, readable in print. Blue and orange come last: they
// are the pipeline's forward and backward hues.
const char* const palette[] = {"#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#9c755f",
                               "#ff9da7", "#7f7f7f", "#bcbd22", "#17becf", "#4e79a7", "#f28e2b"};
constexpr std::size_t palette_size = sizeof(palette) / sizeof(palette[0]);
// Pipeline work: forward in blues, backward in oranges, micro-batches alternate through four shades.
const char* const forward_shades[] = {"#1f4e9c", "#3a72c8", "#6396e0", "#9bbcee"};
const char* const backward_shades[] = {"#b34700", "#e0640f", "#f58f45", "#f9b98a"};
// A deferred weight gradient ("weight mb M chunk C"): apart from both.
const char* const weight_shade = "#6a3d9a";

/// The colours given out while the rows are made, and the legend that names them.
class colour_key {
public:
  /// The colour of a message type or work name: the palette's next one at its first appearance.
  std::string of(const std::string& key) {
    auto it = type_colour_.find(key);
    if (it != type_colour_.end()) return it->second;
    std::string c = palette[type_colour_.size() % palette_size];
    type_colour_.emplace(key, c);
    type_order_.push_back(key);
    return c;
  }
  /// A stage's device work: its phase's shade (of its micro-batch when it names one), else the
  /// colour of its name.
  std::string of_work(const device_slice& s, bool stage, const std::string& name) {
    // Named by micro-batch ("forward mb 2 chunk 0"): its micro-batch's shade, as tagged
    // handler slices are; the plain names of older traces: one shade and a legend entry.
    const bool has_mb = s.micro_batch >= 0;
    const auto shade = static_cast<std::size_t>(has_mb ? s.micro_batch % 4 : 1);
    if (has_mb) max_micro_batch_ = std::max(max_micro_batch_, s.micro_batch);
    if (stage && s.phase == work_phase::forward) {
      (has_mb ? forward_seen_ : device_forward_seen_) = true;
      return forward_shades[shade];
    }
    if (stage && s.phase == work_phase::backward) {
      (has_mb ? backward_seen_ : device_backward_seen_) = true;
      return backward_shades[shade];
    }
    if (stage && s.phase == work_phase::weight) {
      device_weight_seen_ = true;
      return weight_shade;
    }
    return of("work: " + name);
  }
  /// A tagged forward or backward handler slice: its micro-batch's shade.
  std::string of_phase(pipeline_phase phase, std::int64_t micro_batch) {
    const auto shade = static_cast<std::size_t>(std::max<std::int64_t>(micro_batch, 0)) % 4;
    max_micro_batch_ = std::max(max_micro_batch_, micro_batch);
    if (phase == pipeline_phase::forward) {
      forward_seen_ = true;
      return forward_shades[shade];
    }
    backward_seen_ = true;
    return backward_shades[shade];
  }
  /// The legend: the shades seen, then the other colours in the order they were given out.
  std::vector<std::pair<std::string, std::string>> legend() const;

private:
  std::map<std::string, std::string> type_colour_;
  std::vector<std::string> type_order_;
  bool forward_seen_ = false, backward_seen_ = false;
  bool device_forward_seen_ = false, device_backward_seen_ = false, device_weight_seen_ = false;
  std::int64_t max_micro_batch_ = 0;
};

std::vector<std::pair<std::string, std::string>> colour_key::legend() const {
  std::vector<std::pair<std::string, std::string>> legend;  // colour, text
  // One shade per micro-batch residue mod 4: "micro-batch 1, 5, 9" when there are more than four.
  const std::int64_t max_mb = max_micro_batch_;
  auto shade_text = [&](const char* phase, int i) {
    std::string t = std::string(phase) + ", micro-batch " + std::to_string(i);
    if (i + 4 <= max_mb) t += ", " + std::to_string(i + 4);
    if (i + 8 <= max_mb) t += ", " + std::to_string(i + 8) + (i + 12 <= max_mb ? ", …" : "");
    return t;
  };
  const int shades = static_cast<int>(std::min<std::int64_t>(max_mb + 1, 4));
  if (forward_seen_)
    for (int i = 0; i < shades; ++i) legend.push_back({forward_shades[i], shade_text("forward", i)});
  if (backward_seen_)
    for (int i = 0; i < shades; ++i) legend.push_back({backward_shades[i], shade_text("backward", i)});
  if (device_forward_seen_) legend.push_back({forward_shades[1], "forward (stage device work)"});
  if (device_backward_seen_) legend.push_back({backward_shades[1], "backward (stage device work)"});
  if (device_weight_seen_) legend.push_back({weight_shade, "weight gradient (stage device work)"});
  for (const auto& t : type_order_) legend.push_back({type_colour_.at(t), t});
  return legend;
}

std::uint64_t busy_of(const actor_info* a) {
  std::uint64_t b = 0;
  for (const auto& s : a->slices) b += s.end - s.begin;
  return b;
}

/// The actors with handler slices that get a row (busiest first beyond the cap; `hidden` counts
/// the others): pipeline stages in stage order, then the other actors by id.
std::vector<const actor_info*> shown_actors(const trace_model& m, std::size_t& hidden) {
  std::vector<const actor_info*> actors;
  for (const auto& [id, a] : m.actors)
    if (id != 0 && !a.slices.empty()) actors.push_back(&a);
  if (actors.size() > max_actor_rows) {
    std::stable_sort(actors.begin(), actors.end(), [&](auto* a, auto* b) { return busy_of(a) > busy_of(b); });
    hidden = actors.size() - max_actor_rows;
    actors.resize(max_actor_rows);
  }
  std::stable_sort(actors.begin(), actors.end(), [](auto* a, auto* b) {
    auto key = [](const actor_info* x) { return x->pipeline_stage >= 0 ? x->pipeline_stage : INT64_MAX; };
    if (key(a) != key(b)) return key(a) < key(b);
    return a->id < b->id;
  });
  return actors;
}

std::string percent(double v) {
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.0f%%", v);
  return pct;
}

/// A device stream's row: its work items; a stage's device track (device 1e9 + s) in the
/// pipeline's hues.
row stream_row(const trace_model& m, std::pair<std::uint64_t, std::uint64_t> key, const std::vector<device_slice>& slices,
               colour_key& colours) {
  const trace_file& f = *m.file;
  const double span = std::max<double>(1.0, static_cast<double>(m.span()));
  const std::int64_t stage = stage_of_device(key.first);
  row r;
  r.label = stage >= 0 ? "stage " + std::to_string(stage) + " device, stream " + std::to_string(key.second)
                       : "device " + std::to_string(m.local_device(key.first)) + " stream " + std::to_string(key.second);
  if (m.device_rank(key.first) >= 0) r.label += "@r" + std::to_string(m.device_rank(key.first));
  r.life_begin = m.begin;
  r.life_end = m.end;
  std::uint64_t busy = 0;
  for (const auto& s : slices) {
    std::string name = f.string_at(s.name);
    if (name.empty()) name = "work";
    busy += s.end - s.begin;
    const std::string colour = colours.of_work(s, stage >= 0, name);
    r.items.push_back({s.begin, s.end, colour,
                       name + " (work " + std::to_string(s.work) + "), " + duration_label(static_cast<double>(s.end - s.begin))});
  }
  r.detail = percent(100.0 * static_cast<double>(busy) / span);
  return r;
}

/// An actor's row: its handler slices, tagged pipeline work in the pipeline's hues.
row actor_row(const trace_model& m, const actor_info& a, colour_key& colours) {
  const trace_file& f = *m.file;
  row r;
  r.label = a.name + " #" + std::to_string(a.id);
  if (a.pipeline_stage >= 0) r.label += " (stage " + std::to_string(a.pipeline_stage) + ")";
  r.life_begin = a.first_ts;
  r.life_end = a.lifetime_end(m.end);
  double life = static_cast<double>(r.life_end > r.life_begin ? r.life_end - r.life_begin : 0);
  r.detail = percent(life > 0 ? 100.0 * static_cast<double>(busy_of(&a)) / life : 0.0);
  for (const auto& s : a.slices) {
    std::string type = short_type_name(f.type_name(s.type));
    std::string colour;
    std::string tip = type + " (msg " + std::to_string(s.msg) + " from " + m.actor_name(s.sender) + ")";
    if (s.phase == pipeline_phase::forward || s.phase == pipeline_phase::backward) {
      colour = colours.of_phase(s.phase, s.micro_batch);
      tip = (s.phase == pipeline_phase::forward ? "forward" : "backward") + std::string(" micro-batch ") +
            std::to_string(s.micro_batch) + ": " + tip;
    } else {
      colour = colours.of(type);
    }
    tip += ", " + duration_label(static_cast<double>(s.end - s.begin));
    r.items.push_back({s.begin, s.end, colour, tip});
  }
  return r;
}

}  // namespace

std::string duration_label(double ns) {
  char buf[32];
  if (ns == 0) return "0";
  if (ns < 1e3) std::snprintf(buf, sizeof buf, "%.4g ns", ns);
  else if (ns < 1e6) std::snprintf(buf, sizeof buf, "%.4g us", ns / 1e3);
  else if (ns < 1e9) std::snprintf(buf, sizeof buf, "%.4g ms", ns / 1e6);
  else std::snprintf(buf, sizeof buf, "%.4g s", ns / 1e9);
  return buf;
}

timeline_content timeline_rows(const trace_model& m) {
  timeline_content c;
  colour_key colours;
  const auto actors = shown_actors(m, c.hidden);
  // The device streams first (their colours come first); a stage's device track goes right
  // below the stage's actor.
  std::map<std::int64_t, std::vector<row>> stage_device_rows;
  std::vector<row> device_rows;
  for (const auto& [key, slices] : m.streams) {
    const std::int64_t stage = stage_of_device(key.first);
    if (stage >= 0) stage_device_rows[stage].push_back(stream_row(m, key, slices, colours));
    else device_rows.push_back(stream_row(m, key, slices, colours));
  }
  for (const auto* a : actors) {
    c.rows.push_back(actor_row(m, *a, colours));
    if (auto d = stage_device_rows.find(a->pipeline_stage); a->pipeline_stage >= 0 && d != stage_device_rows.end()) {
      for (auto& dr : d->second) c.rows.push_back(std::move(dr));
      stage_device_rows.erase(d);
    }
  }
  for (auto& [stage, list] : stage_device_rows)  // stage device tracks without a tagged actor
    for (auto& dr : list) c.rows.push_back(std::move(dr));
  for (auto& dr : device_rows) c.rows.push_back(std::move(dr));
  c.legend = colours.legend();
  return c;
}

}  // namespace strata::trace_tools
