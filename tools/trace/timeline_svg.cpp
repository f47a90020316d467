// SVG timeline: one row per actor and device stream, drawn from the measured slices (the rows,
// their colours and the legend come from timeline_rows.cpp).
//
// Slices at least `min_rect_px` wide are drawn as rectangles (with a tooltip). Narrower slices
// would all merge into a solid bar, hiding idle time, so they are accumulated per pixel column
// instead and drawn with an opacity equal to the busy fraction of that column.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "timeline_rows.hpp"
#include "trace_views.hpp"

namespace strata::trace_tools {

namespace {

constexpr double min_rect_px = 2.0;
constexpr int label_width = 230;
constexpr int right_margin = 24;
constexpr int row_height = 20;
constexpr int row_gap = 4;
constexpr int top = 56;

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

/// A 1-2-5 step giving about `target` ticks over `span` ns.
double tick_step(double span, int target) {
  if (span <= 0) return 1;
  double raw = span / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

/// Where things go in the picture.
struct layout {
  int width = 0;
  double plot_w = 0;
  std::uint64_t t0 = 0;
  double span = 1;
  int legend_cols = 1, legend_rows = 0;
  int rows_h = 0, axis_y = 0, legend_y = 0, height = 0;

  double x_of(std::uint64_t t) const { return label_width + (static_cast<double>(t - t0) / span) * plot_w; }
};

layout layout_of(const trace_model& m, const timeline_options& opts, const timeline_content& c) {
  layout l;
  l.width = std::max(opts.width, label_width + right_margin + 100);
  l.plot_w = l.width - label_width - right_margin;
  l.t0 = m.begin;
  l.span = std::max<double>(1.0, static_cast<double>(m.span()));
  l.legend_cols = std::max(1, (l.width - 40) / 300);
  l.legend_rows = static_cast<int>((c.legend.size() + static_cast<std::size_t>(l.legend_cols) - 1) /
                                   static_cast<std::size_t>(l.legend_cols));
  l.rows_h = static_cast<int>(c.rows.size()) * (row_height + row_gap);
  l.axis_y = top + l.rows_h + 4;
  l.legend_y = l.axis_y + 44;
  l.height = l.legend_y + l.legend_rows * 20 + (c.hidden ? 24 : 0) + 16;
  return l;
}

/// The white page, the trace's name and what the bars mean.
void draw_heading(std::ostringstream& svg, const trace_file& f, const layout& l) {
  svg << R"(<svg xmlns="http://www.w3.org/2000/svg" width=")" << l.width << R"(" height=")" << l.height
      << R"(" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">)" << '\n';
  svg << R"(<rect x="0" y="0" width=")" << l.width << R"(" height=")" << l.height << R"(" fill="white"/>)" << '\n';
  svg << R"(<text x="12" y="22" font-size="15" font-weight="bold">)" << escape(f.name) << "</text>\n";
  svg << R"(<text x="12" y="42" fill="#555">)" << f.events.size() << " events, " << duration_label(l.span)
      << " span; bars: handler time per actor (shaded: busy fraction of a pixel), grey: alive and idle</text>\n";
}

/// The grid, the time axis and its ticks.
void draw_axis(std::ostringstream& svg, const layout& l) {
  const double step = tick_step(l.span, std::max(2, static_cast<int>(l.plot_w / 130)));
  svg << R"(<g stroke="#ddd" stroke-width="1">)";
  for (double t = 0; t <= l.span + 0.5; t += step) {
    double x = label_width + t / l.span * l.plot_w;
    svg << R"(<line x1=")" << fmt(x) << R"(" y1=")" << top - 4 << R"(" x2=")" << fmt(x) << R"(" y2=")" << l.axis_y
        << R"("/>)";
  }
  svg << "</g>\n";
  svg << R"(<line x1=")" << label_width << R"(" y1=")" << l.axis_y << R"(" x2=")" << label_width + l.plot_w << R"(" y2=")"
      << l.axis_y << R"(" stroke="#333"/>)" << '\n';
  for (double t = 0; t <= l.span + 0.5; t += step) {
    double x = label_width + t / l.span * l.plot_w;
    svg << R"(<line x1=")" << fmt(x) << R"(" y1=")" << l.axis_y << R"(" x2=")" << fmt(x) << R"(" y2=")" << l.axis_y + 5
        << R"(" stroke="#333"/>)";
    svg << R"(<text x=")" << fmt(x) << R"(" y=")" << l.axis_y + 18 << R"(" text-anchor="middle">)" << duration_label(t)
        << "</text>\n";
  }
  svg << R"(<text x=")" << fmt(label_width + l.plot_w / 2) << R"(" y=")" << l.axis_y + 36
      << R"(" text-anchor="middle" fill="#555">time since the first event</text>)" << '\n';
}

/// Busy pixel length per colour in each pixel column of a row.
using pixel_columns = std::map<long, std::map<std::string, double>>;

/// A row's wide slices as rectangles with their tooltips; the narrow ones are spread over the
/// pixel columns they touch, which this returns.
pixel_columns draw_wide_items(std::ostringstream& svg, const row& r, int y, const layout& l) {
  pixel_columns columns;
  for (const auto& it : r.items) {
    double x0 = l.x_of(it.begin), x1 = l.x_of(it.end);
    if (x1 - x0 >= min_rect_px) {
      svg << R"(<rect x=")" << fmt(x0) << R"(" y=")" << y << R"(" width=")" << fmt(x1 - x0) << R"(" height=")"
          << row_height << R"(" fill=")" << it.colour << R"(" stroke="#333" stroke-width="0.4"><title>)"
          << escape(it.tooltip) << "</title></rect>\n";
      continue;
    }
    for (long c = static_cast<long>(std::floor(x0)); c <= static_cast<long>(std::floor(x1)); ++c) {
      double a = std::max(x0, static_cast<double>(c)), b = std::min(x1, static_cast<double>(c + 1));
      double share = b > a ? b - a : (x1 == x0 ? 0.05 : 0.0);  // zero-length slices still show faintly
      if (share > 0) columns[c][it.colour] += share;
    }
  }
  return columns;
}

/// The pixel columns of a row, each in its dominant colour with its busy fraction as opacity:
/// runs of adjacent columns with the same colour and shade become one rect.
void draw_columns(std::ostringstream& svg, const pixel_columns& columns, int y) {
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
}

/// A row: its label and busy share, its lifetime in grey, its slices.
void draw_row(std::ostringstream& svg, const row& r, int y, const layout& l) {
  svg << R"(<text x="8" y=")" << y + 14 << R"(">)" << escape(clip(r.label, 30))
      << "</text>";
  svg << R"(<text x=")" << label_width - 8 << R"(" y=")" << y + 14 << R"(" text-anchor="end" fill="#555">)" << r.detail
      << "</text>\n";
  double lx0 = l.x_of(std::max(r.life_begin, l.t0)), lx1 = l.x_of(std::max(r.life_end, r.life_begin));
  svg << R"(<rect x=")" << fmt(lx0) << R"(" y=")" << y << R"(" width=")" << fmt(std::max(lx1 - lx0, 1.0))
      << R"(" height=")" << row_height << R"(" fill="#eeeeee"/>)" << '\n';
  draw_columns(svg, draw_wide_items(svg, r, y, l), y);
  svg << '\n';
}

/// The legend below the axis, and a note on the actors left out.
void draw_legend(std::ostringstream& svg, const timeline_content& c, const layout& l) {
  for (std::size_t i = 0; i < c.legend.size(); ++i) {
    int col = static_cast<int>(i % static_cast<std::size_t>(l.legend_cols)), line = static_cast<int>(i / static_cast<std::size_t>(l.legend_cols));
    int x = 12 + col * 300, y = l.legend_y + line * 20;
    svg << R"(<rect x=")" << x << R"(" y=")" << y << R"(" width="14" height="14" fill=")" << c.legend[i].first
        << R"(" stroke="#333" stroke-width="0.4"/>)";
    std::string text = clip(c.legend[i].second, 42);
    svg << R"(<text x=")" << x + 20 << R"(" y=")" << y + 12 << R"(">)" << escape(text) << "</text>\n";
  }
  if (c.hidden) {
    svg << R"(<text x="12" y=")" << l.legend_y + l.legend_rows * 20 + 16 << R"(" fill="#a00">)" << c.hidden
        << " less busy actors not shown (" << max_actor_rows << " rows at most)</text>\n";
  }
}

}  // namespace

std::string timeline_svg(const trace_model& m, const timeline_options& opts) {
  const timeline_content content = timeline_rows(m);
  const layout l = layout_of(m, opts, content);
  std::ostringstream svg;
  draw_heading(svg, *m.file, l);
  draw_axis(svg, l);
  for (std::size_t i = 0; i < content.rows.size(); ++i)
    draw_row(svg, content.rows[i], top + static_cast<int>(i) * (row_height + row_gap), l);
  svg << R"(<rect x=")" << label_width << R"(" y=")" << top - 4 << R"(" width=")" << fmt(l.plot_w) << R"(" height=")"
      << l.rows_h + 8 << R"(" fill="none" stroke="#999"/>)" << '\n';
  draw_legend(svg, content, l);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace strata::trace_tools
