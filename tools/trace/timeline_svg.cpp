// SVG timeline: one row per actor and device stream, drawn from the measured slices.
//
// Slices at least `min_rect_px` wide are drawn as rectangles (with a tooltip). Narrower slices
// would all merge into a solid bar, hiding idle time, so they are accumulated per pixel column
// instead and drawn with an opacity equal to the busy fraction of that column.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "trace_views.hpp"

namespace strata::trace_tools {

namespace {

constexpr double min_rect_px = 2.0;
constexpr int label_width = 230;
constexpr int right_margin = 24;
constexpr int row_height = 20;
constexpr int row_gap = 4;
constexpr int top = 56;
constexpr std::size_t max_actor_rows = 64;

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

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default:
        // Control characters are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') out += '?';
        else out += c;
    }
  }
  return out;
}

/// At most `n` bytes of `s`, cut on a UTF-8 character boundary, with an ellipsis when cut.
std::string clip(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "…";
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string duration_label(double ns) {
  char buf[32];
  if (ns == 0) return "0";
  if (ns < 1e3) std::snprintf(buf, sizeof buf, "%.4g ns", ns);
  else if (ns < 1e6) std::snprintf(buf, sizeof buf, "%.4g us", ns / 1e3);
  else if (ns < 1e9) std::snprintf(buf, sizeof buf, "%.4g ms", ns / 1e6);
  else std::snprintf(buf, sizeof buf, "%.4g s", ns / 1e9);
  return buf;
}

/// A 1-2-5 step giving about `target` ticks over `span` ns.
double tick_step(double span, int target) {
  if (span <= 0) return 1;
  double raw = span / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

struct row_item {
  std::uint64_t begin, end;
  std::string colour;
  std::string tooltip;
};

struct row {
  std::string label;
  std::string detail;  // right-aligned in the label column (busy %)
  std::uint64_t life_begin = 0, life_end = 0;
  std::vector<row_item> items;
};

}  // namespace

std::string timeline_svg(const trace_model& m, const timeline_options& opts) {
  const trace_file& f = *m.file;
  const int width = std::max(opts.width, label_width + right_margin + 100);
  const double plot_w = width - label_width - right_margin;
  const std::uint64_t t0 = m.begin;
  const double span = std::max<double>(1.0, static_cast<double>(m.span()));
  auto x_of = [&](std::uint64_t t) { return label_width + (static_cast<double>(t - t0) / span) * plot_w; };

  // Colours: per message type (by first appearance), pipeline phases apart.
  std::map<std::string, std::string> type_colour;
  std::vector<std::string> type_order;
  bool forward_seen = false, backward_seen = false;
  std::int64_t max_micro_batch = 0;
  auto colour_for = [&](const std::string& key) -> std::string {
    auto it = type_colour.find(key);
    if (it != type_colour.end()) return it->second;
    std::string c = palette[type_colour.size() % palette_size];
    type_colour.emplace(key, c);
    type_order.push_back(key);
    return c;
  };

  // Rows: actors with handler slices (busiest first beyond the cap), then device streams.
  std::vector<const actor_info*> actors;
  for (const auto& [id, a] : m.actors)
    if (id != 0 && !a.slices.empty()) actors.push_back(&a);
  auto busy_of = [](const actor_info* a) {
    std::uint64_t b = 0;
    for (const auto& s : a->slices) b += s.end - s.begin;
    return b;
  };
  std::size_t hidden = 0;
  if (actors.size() > max_actor_rows) {
    std::stable_sort(actors.begin(), actors.end(), [&](auto* a, auto* b) { return busy_of(a) > busy_of(b); });
    hidden = actors.size() - max_actor_rows;
    actors.resize(max_actor_rows);
  }
  // Pipeline stages in stage order, then the other actors by id.
  std::stable_sort(actors.begin(), actors.end(), [](auto* a, auto* b) {
    auto key = [](const actor_info* x) { return x->pipeline_stage >= 0 ? x->pipeline_stage : INT64_MAX; };
    if (key(a) != key(b)) return key(a) < key(b);
    return a->id < b->id;
  });

  // Device streams; a stage's device track (device 1e9 + s) is drawn right below the stage's
  // actor, its forward and backward work in the pipeline hues.
  bool device_forward_seen = false, device_backward_seen = false, device_weight_seen = false;
  std::map<std::int64_t, std::vector<row>> stage_device_rows;
  std::vector<row> device_rows;
  for (const auto& [key, slices] : m.streams) {
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
      std::string colour;
      // Named by micro-batch ("forward mb 2 chunk 0"): its micro-batch's shade, as tagged
      // handler slices are; the plain names of older traces: one shade and a legend entry.
      const bool has_mb = s.micro_batch >= 0;
      const auto shade = static_cast<std::size_t>(has_mb ? s.micro_batch % 4 : 1);
      if (has_mb) max_micro_batch = std::max(max_micro_batch, s.micro_batch);
      if (stage >= 0 && s.phase == work_phase::forward) {
        colour = forward_shades[shade];
        (has_mb ? forward_seen : device_forward_seen) = true;
      } else if (stage >= 0 && s.phase == work_phase::backward) {
        colour = backward_shades[shade];
        (has_mb ? backward_seen : device_backward_seen) = true;
      } else if (stage >= 0 && s.phase == work_phase::weight) {
        colour = weight_shade;
        device_weight_seen = true;
      } else {
        colour = colour_for("work: " + name);
      }
      r.items.push_back({s.begin, s.end, colour,
                         name + " (work " + std::to_string(s.work) + "), " + duration_label(static_cast<double>(s.end - s.begin))});
    }
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.0f%%", 100.0 * static_cast<double>(busy) / span);
    r.detail = pct;
    if (stage >= 0) stage_device_rows[stage].push_back(std::move(r));
    else device_rows.push_back(std::move(r));
  }
  std::vector<row> rows;
  for (const auto* a : actors) {
    row r;
    r.label = a->name + " #" + std::to_string(a->id);
    if (a->pipeline_stage >= 0) r.label += " (stage " + std::to_string(a->pipeline_stage) + ")";
    r.life_begin = a->first_ts;
    r.life_end = a->lifetime_end(m.end);
    double life = static_cast<double>(r.life_end > r.life_begin ? r.life_end - r.life_begin : 0);
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.0f%%", life > 0 ? 100.0 * static_cast<double>(busy_of(a)) / life : 0.0);
    r.detail = pct;
    for (const auto& s : a->slices) {
      std::string type = short_type_name(f.type_name(s.type));
      std::string colour;
      std::string tip = type + " (msg " + std::to_string(s.msg) + " from " + m.actor_name(s.sender) + ")";
      if (s.phase == pipeline_phase::forward) {
        colour = forward_shades[static_cast<std::size_t>(std::max<std::int64_t>(s.micro_batch, 0)) % 4];
        forward_seen = true;
        max_micro_batch = std::max(max_micro_batch, s.micro_batch);
        tip = "forward micro-batch " + std::to_string(s.micro_batch) + ": " + tip;
      } else if (s.phase == pipeline_phase::backward) {
        colour = backward_shades[static_cast<std::size_t>(std::max<std::int64_t>(s.micro_batch, 0)) % 4];
        backward_seen = true;
        max_micro_batch = std::max(max_micro_batch, s.micro_batch);
        tip = "backward micro-batch " + std::to_string(s.micro_batch) + ": " + tip;
      } else {
        colour = colour_for(type);
      }
      tip += ", " + duration_label(static_cast<double>(s.end - s.begin));
      r.items.push_back({s.begin, s.end, colour, tip});
    }
    rows.push_back(std::move(r));
    if (auto d = stage_device_rows.find(a->pipeline_stage); a->pipeline_stage >= 0 && d != stage_device_rows.end()) {
      for (auto& dr : d->second) rows.push_back(std::move(dr));
      stage_device_rows.erase(d);
    }
  }
  for (auto& [stage, list] : stage_device_rows)  // stage device tracks without a tagged actor
    for (auto& dr : list) rows.push_back(std::move(dr));
  for (auto& dr : device_rows) rows.push_back(std::move(dr));
  // Legend entries.
  std::vector<std::pair<std::string, std::string>> legend;  // colour, text
  // One shade per micro-batch residue mod 4: "micro-batch 1, 5, 9" when there are more than four.
  auto shade_text = [&](const char* phase, int i) {
    std::string t = std::string(phase) + ", micro-batch " + std::to_string(i);
    if (i + 4 <= max_micro_batch) t += ", " + std::to_string(i + 4);
    if (i + 8 <= max_micro_batch) t += ", " + std::to_string(i + 8) + (i + 12 <= max_micro_batch ? ", …" : "");
    return t;
  };
  const int shades = static_cast<int>(std::min<std::int64_t>(max_micro_batch + 1, 4));
  if (forward_seen)
    for (int i = 0; i < shades; ++i) legend.push_back({forward_shades[i], shade_text("forward", i)});
  if (backward_seen)
    for (int i = 0; i < shades; ++i) legend.push_back({backward_shades[i], shade_text("backward", i)});
  if (device_forward_seen) legend.push_back({forward_shades[1], "forward (stage device work)"});
  if (device_backward_seen) legend.push_back({backward_shades[1], "backward (stage device work)"});
  if (device_weight_seen) legend.push_back({weight_shade, "weight gradient (stage device work)"});
  for (const auto& t : type_order) legend.push_back({type_colour[t], t});
  const int legend_cols = std::max(1, (width - 40) / 300);
  const int legend_rows = static_cast<int>((legend.size() + static_cast<std::size_t>(legend_cols) - 1) / static_cast<std::size_t>(legend_cols));

  const int rows_h = static_cast<int>(rows.size()) * (row_height + row_gap);
  const int axis_y = top + rows_h + 4;
  const int legend_y = axis_y + 44;
  const int height = legend_y + legend_rows * 20 + (hidden ? 24 : 0) + 16;

  std::ostringstream svg;
  svg << R"(<svg xmlns="http://www.w3.org/2000/svg" width=")" << width << R"(" height=")" << height
      << R"(" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">)" << '\n';
  svg << R"(<rect x="0" y="0" width=")" << width << R"(" height=")" << height << R"(" fill="white"/>)" << '\n';
  svg << R"(<text x="12" y="22" font-size="15" font-weight="bold">)" << escape(f.name) << "</text>\n";
  svg << R"(<text x="12" y="42" fill="#555">)" << f.events.size() << " events, " << duration_label(span)
      << " span; bars: handler time per actor (shaded: busy fraction of a pixel), grey: alive and idle</text>\n";

  // Grid and axis.
  const double step = tick_step(span, std::max(2, static_cast<int>(plot_w / 130)));
  svg << R"(<g stroke="#ddd" stroke-width="1">)";
  for (double t = 0; t <= span + 0.5; t += step) {
    double x = label_width + t / span * plot_w;
    svg << R"(<line x1=")" << fmt(x) << R"(" y1=")" << top - 4 << R"(" x2=")" << fmt(x) << R"(" y2=")" << axis_y
        << R"("/>)";
  }
  svg << "</g>\n";
  svg << R"(<line x1=")" << label_width << R"(" y1=")" << axis_y << R"(" x2=")" << label_width + plot_w << R"(" y2=")"
      << axis_y << R"(" stroke="#333"/>)" << '\n';
  for (double t = 0; t <= span + 0.5; t += step) {
    double x = label_width + t / span * plot_w;
    svg << R"(<line x1=")" << fmt(x) << R"(" y1=")" << axis_y << R"(" x2=")" << fmt(x) << R"(" y2=")" << axis_y + 5
        << R"(" stroke="#333"/>)";
    svg << R"(<text x=")" << fmt(x) << R"(" y=")" << axis_y + 18 << R"(" text-anchor="middle">)" << duration_label(t)
        << "</text>\n";
  }
  svg << R"(<text x=")" << fmt(label_width + plot_w / 2) << R"(" y=")" << axis_y + 36
      << R"(" text-anchor="middle" fill="#555">time since the first event</text>)" << '\n';

  // Rows.
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    const int y = top + static_cast<int>(i) * (row_height + row_gap);
    svg << R"(<text x="8" y=")" << y + 14 << R"(">)" << escape(clip(r.label, 30))
        << "</text>";
    svg << R"(<text x=")" << label_width - 8 << R"(" y=")" << y + 14 << R"(" text-anchor="end" fill="#555">)" << r.detail
        << "</text>\n";
    double lx0 = x_of(std::max(r.life_begin, t0)), lx1 = x_of(std::max(r.life_end, r.life_begin));
    svg << R"(<rect x=")" << fmt(lx0) << R"(" y=")" << y << R"(" width=")" << fmt(std::max(lx1 - lx0, 1.0))
        << R"(" height=")" << row_height << R"(" fill="#eeeeee"/>)" << '\n';
    // Per-pixel accumulation of narrow slices: busy ns per colour per column.
    std::map<long, std::map<std::string, double>> columns;
    for (const auto& it : r.items) {
      double x0 = x_of(it.begin), x1 = x_of(it.end);
      if (x1 - x0 >= min_rect_px) {
        svg << R"(<rect x=")" << fmt(x0) << R"(" y=")" << y << R"(" width=")" << fmt(x1 - x0) << R"(" height=")"
            << row_height << R"(" fill=")" << it.colour << R"(" stroke="#333" stroke-width="0.4"><title>)"
            << escape(it.tooltip) << "</title></rect>\n";
        continue;
      }
      // Spread the slice's pixel length over the columns it touches.
      for (long c = static_cast<long>(std::floor(x0)); c <= static_cast<long>(std::floor(x1)); ++c) {
        double a = std::max(x0, static_cast<double>(c)), b = std::min(x1, static_cast<double>(c + 1));
        double share = b > a ? b - a : (x1 == x0 ? 0.05 : 0.0);  // zero-length slices still show faintly
        if (share > 0) columns[c][it.colour] += share;
      }
    }
    // Runs of adjacent columns with the same dominant colour and shade become one rect.
    long run_start = 0, run_end = -2;
    std::string run_colour;
    int run_shade = 0;
    auto flush = [&] {
      if (run_end < run_start) return;
      svg << R"(<rect x=")" << run_start << R"(" y=")" << y << R"(" width=")" << run_end - run_start + 1
          << R"(" height=")" << row_height << R"(" fill=")" << run_colour << R"(" fill-opacity=")"
          << fmt(run_shade / 10.0) << R"("/>)";
    };
    for (const auto& [c, by_colour] : columns) {
      double total = 0, best = -1;
      std::string colour;
      for (const auto& [col, share] : by_colour) {
        total += share;
        if (share > best) best = share, colour = col;
      }
      int shade = std::clamp(static_cast<int>(std::lround(std::min(total, 1.0) * 10)), 2, 10);
      if (c == run_end + 1 && colour == run_colour && shade == run_shade) {
        run_end = c;
        continue;
      }
      flush();
      run_start = run_end = c;
      run_colour = colour;
      run_shade = shade;
    }
    flush();
    svg << '\n';
  }
  svg << R"(<rect x=")" << label_width << R"(" y=")" << top - 4 << R"(" width=")" << fmt(plot_w) << R"(" height=")"
      << rows_h + 8 << R"(" fill="none" stroke="#999"/>)" << '\n';

  // Legend.
  for (std::size_t i = 0; i < legend.size(); ++i) {
    int col = static_cast<int>(i % static_cast<std::size_t>(legend_cols)), line = static_cast<int>(i / static_cast<std::size_t>(legend_cols));
    int x = 12 + col * 300, y = legend_y + line * 20;
    svg << R"(<rect x=")" << x << R"(" y=")" << y << R"(" width="14" height="14" fill=")" << legend[i].first
        << R"(" stroke="#333" stroke-width="0.4"/>)";
    std::string text = clip(legend[i].second, 42);
    svg << R"(<text x=")" << x + 20 << R"(" y=")" << y + 12 << R"(">)" << escape(text) << "</text>\n";
  }
  if (hidden) {
    svg << R"(<text x="12" y=")" << legend_y + legend_rows * 20 + 16 << R"(" fill="#a00">)" << hidden
        << " less busy actors not shown (" << max_actor_rows << " rows at most)</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace strata::trace_tools
