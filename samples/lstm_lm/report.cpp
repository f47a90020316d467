#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace lstm_lm {

std::string fmt(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

namespace {

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write '" + path.string() + "'");
}

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

/// "Nice" tick spacing for a range.
double tick_step(double range, int target) {
  if (range <= 0) return 1;
  const double raw = range / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

}  // namespace

std::string loss_curve_svg(const std::vector<curve_point>& train, const std::vector<curve_point>& validation) {
  const double W = 860, Hh = 440, left = 70, right = 20, top = 40, bottom = 60;
  double x0 = 0, x1 = 1, y0 = 1e300, y1 = -1e300;
  for (const auto* pts : {&train, &validation})
    for (const auto& p : *pts) {
      x1 = std::max(x1, p.step);
      y0 = std::min(y0, p.value);
      y1 = std::max(y1, p.value);
    }
  if (y0 > y1) y0 = 0, y1 = 1;
  const double pad = std::max(0.05 * (y1 - y0), 1e-3);
  y0 = std::max(0.0, y0 - pad);
  y1 += pad;
  auto X = [&](double s) { return left + (s - x0) / (x1 - x0) * (W - left - right); };
  auto Y = [&](double v) { return top + (y1 - v) / (y1 - y0) * (Hh - top - bottom); };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << Hh << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='15'>Cross-entropy per token (nats)</text>\n";
  const double xs = tick_step(x1 - x0, 8), ys = tick_step(y1 - y0, 6);
  for (double v = std::ceil(y0 / ys) * ys; v <= y1 + 1e-12; v += ys)
    o << "<line x1='" << left << "' x2='" << W - right << "' y1='" << Y(v) << "' y2='" << Y(v) << "' stroke='#e4e4e4'/>"
      << "<text x='" << left - 6 << "' y='" << Y(v) + 4 << "' text-anchor='end'>" << fmt(v, ys < 0.1 ? 2 : 1) << "</text>\n";
  for (double s = 0; s <= x1 + 1e-9; s += xs)
    o << "<line x1='" << X(s) << "' x2='" << X(s) << "' y1='" << top << "' y2='" << Hh - bottom << "' stroke='#f0f0f0'/>"
      << "<text x='" << X(s) << "' y='" << Hh - bottom + 16 << "' text-anchor='middle'>" << fmt(s, 0) << "</text>\n";
  o << "<rect x='" << left << "' y='" << top << "' width='" << W - left - right << "' height='" << Hh - top - bottom
    << "' fill='none' stroke='#888'/>\n"
    << "<text x='" << (left + W - right) / 2 << "' y='" << Hh - 20 << "' text-anchor='middle'>step</text>\n";
  if (!train.empty()) {
    o << "<polyline fill='none' stroke='#9ecae1' stroke-width='1' points='";
    for (const auto& p : train) o << fmt(X(p.step), 1) << ',' << fmt(Y(p.value), 1) << ' ';
    o << "'/>\n";
    // Moving average over a window of ~2% of the steps (at least 1).
    const std::size_t win = std::max<std::size_t>(1, train.size() / 50);
    double sum = 0;
    o << "<polyline fill='none' stroke='#08519c' stroke-width='2.2' points='";
    for (std::size_t i = 0; i < train.size(); ++i) {
      sum += train[i].value;
      if (i >= win) sum -= train[i - win].value;
      const double avg = sum / static_cast<double>(std::min(i + 1, win));
      o << fmt(X(train[i].step), 1) << ',' << fmt(Y(avg), 1) << ' ';
    }
    o << "'/>\n";
  }
  for (const auto& p : validation)
    o << "<circle cx='" << X(p.step) << "' cy='" << Y(p.value) << "' r='5' fill='#d62728'/>\n";
  const double lx = W - right - 230, ly = top + 14;
  o << "<rect x='" << lx - 8 << "' y='" << ly - 12 << "' width='230' height='58' fill='white' stroke='#ccc'/>"
    << "<line x1='" << lx << "' x2='" << lx + 24 << "' y1='" << ly - 4 << "' y2='" << ly - 4 << "' stroke='#9ecae1'/>"
    << "<text x='" << lx + 30 << "' y='" << ly << "'>training loss per step</text>"
    << "<line x1='" << lx << "' x2='" << lx + 24 << "' y1='" << ly + 14 << "' y2='" << ly + 14
    << "' stroke='#08519c' stroke-width='2.2'/>"
    << "<text x='" << lx + 30 << "' y='" << ly + 18 << "'>moving average</text>"
    << "<circle cx='" << lx + 12 << "' cy='" << ly + 32 << "' r='5' fill='#d62728'/>"
    << "<text x='" << lx + 30 << "' y='" << ly + 36 << "'>validation loss</text>\n";
  o << "</svg>\n";
  return o.str();
}

std::string timeline_svg(const std::vector<strata::pipeline::timeline_entry>& timeline, int stages, int chunks,
                         const std::string& title) {
  using strata::pipeline::action_kind;
  const double W = 1000, left = 90, right = 20, top = 50, row = 46, gap = 10;
  const double Hh = top + stages * (row + gap) + 70;
  double end = 0;
  for (const auto& e : timeline) end = std::max(end, e.end);
  if (end <= 0) end = 1;
  auto X = [&](double t) { return left + t / end * (W - left - right); };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << Hh << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='15'>" << escape(title) << "</text>\n";
  for (int s = 0; s < stages; ++s) {
    const double y = top + s * (row + gap);
    o << "<rect x='" << left << "' y='" << y << "' width='" << W - left - right << "' height='" << row
      << "' fill='#f6f6f6'/><text x='" << left - 8 << "' y='" << y + row / 2 + 4 << "' text-anchor='end'>stage " << s
      << "</text>\n";
  }
  for (const auto& e : timeline) {
    const bool fwd = e.kind == action_kind::forward, bwd = e.kind == action_kind::backward;
    const char* fill = fwd ? "#4c78a8" : bwd ? "#f58518" : "#9d9d9d";
    const double y = top + e.stage * (row + gap), x = X(e.start), w = std::max(X(e.end) - x, 0.8);
    o << "<rect x='" << fmt(x, 2) << "' y='" << y + 3 << "' width='" << fmt(w, 2) << "' height='" << row - 6 << "' fill='"
      << fill << "' stroke='white' stroke-width='0.8'/>";
    if (e.micro_batch >= 0) {
      std::string label = (fwd ? "F" : "B") + std::to_string(e.micro_batch);
      if (chunks > 1) label += "." + std::to_string(e.chunk);
      // 12px text needs ~7px per character, 9px text ~5.2px; narrower boxes stay unlabelled.
      const double per_char = w / static_cast<double>(label.size());
      if (per_char >= 5.2)
        o << "<text x='" << fmt(x + w / 2, 2) << "' y='" << y + row / 2 + 4 << "' text-anchor='middle' fill='white'"
          << (per_char < 7.0 ? " font-size='9'" : "") << ">" << label << "</text>";
    }
    o << '\n';
  }
  const double ay = top + stages * (row + gap) + 4, ts = tick_step(end, 10);
  o << "<line x1='" << left << "' x2='" << W - right << "' y1='" << ay << "' y2='" << ay << "' stroke='#555'/>\n";
  for (double t = 0; t <= end + 1e-9; t += ts)
    o << "<line x1='" << X(t) << "' x2='" << X(t) << "' y1='" << ay << "' y2='" << ay + 5 << "' stroke='#555'/><text x='"
      << X(t) << "' y='" << ay + 18 << "' text-anchor='middle'>" << fmt(t, ts < 1 ? 1 : 0) << "</text>\n";
  o << "<text x='" << (left + W - right) / 2 << "' y='" << ay + 36 << "' text-anchor='middle'>ms</text>\n";
  const double ly = ay + 52;
  o << "<rect x='" << left << "' y='" << ly - 10 << "' width='14' height='12' fill='#4c78a8'/><text x='" << left + 20
    << "' y='" << ly << "'>forward (Fm" << (chunks > 1 ? ".c" : "") << ": micro-batch m" << (chunks > 1 ? ", chunk c" : "")
    << ")</text><rect x='" << left + 300 << "' y='" << ly - 10 << "' width='14' height='12' fill='#f58518'/><text x='"
    << left + 320 << "' y='" << ly << "'>backward (Bm" << (chunks > 1 ? ".c" : "") << ")</text>\n";
  o << "</svg>\n";
  return o.str();
}

std::string index_html(const std::string& title, const std::vector<std::pair<std::string, std::string>>& figures,
                       const std::string& plan_text) {
  std::ostringstream o;
  o << "<!doctype html>\n<html><head><meta charset='utf-8'><title>" << escape(title) << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:2em;max-width:1050px}table{border-collapse:collapse}"
    << "td{padding:3px 12px;border-bottom:1px solid #ddd}td:first-child{color:#555}pre{background:#f6f6f6;padding:8px}"
    << "</style></head><body>\n<h1>" << escape(title) << "</h1>\n<table>\n";
  for (const auto& [k, v] : figures) o << "<tr><td>" << escape(k) << "</td><td>" << escape(v) << "</td></tr>\n";
  o << "</table>\n<h2>Loss</h2>\n<img src='loss.svg' alt='loss curve'>\n"
    << "<h2>Pipeline timeline (one step, measured stage times, no runtime cost)</h2>\n"
    << "<img src='timeline.svg' alt='pipeline timeline'>\n<h2>Plan</h2>\n<pre>" << escape(plan_text) << "</pre>\n"
    << "</body></html>\n";
  return o.str();
}

std::string write_report(const strata::lm::training_result& r, const std::string& report) {
  namespace lm = strata::lm;
  namespace pl = strata::pipeline;
  const auto& s = r.setup;
  const auto& cfg = s.model;
  std::filesystem::path dir(report);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create --report directory '" + report + "'");
  std::vector<curve_point> curve, val_curve;
  for (auto p : r.losses) curve.push_back({p.step, p.loss});
  for (auto p : r.validation_losses) val_curve.push_back({p.step, p.loss});
  const std::size_t stages = s.layer_counts.size();
  const std::string sched = pl::to_string(s.schedule);
  const std::string mbs = std::to_string(cfg.micro_batches) + (cfg.micro_batches == 1 ? " micro-batch" : " micro-batches");
  write_text(dir / "loss.svg", loss_curve_svg(curve, val_curve));
  write_text(dir / "timeline.svg",
             timeline_svg(r.timeline, static_cast<int>(stages), static_cast<int>(cfg.chunks),
                                   sched + ", " + std::to_string(stages) + " stages, " + mbs + ": ideal step " +
                                       fmt(r.ideal_step_ms, 1) + " ms, bubble " + fmt(r.ideal_bubble, 3)));
  std::vector<std::pair<std::string, std::string>> figures = {
      {"corpus", s.source},
      {"model", std::to_string(cfg.layers) + " x LSTM(" + std::to_string(cfg.hidden) + "), embed " + std::to_string(cfg.embed) +
                    ", vocabulary " + std::to_string(cfg.vocab) + " (" + lm::to_string(s.tokens) + ")"},
      {"batch x seq", std::to_string(cfg.batch) + " x " + std::to_string(cfg.seq)},
      {"devices / schedule", s.devices + ", " + sched + ", " + std::to_string(cfg.micro_batches) + " micro-batches, " +
                                 std::to_string(cfg.chunks) + " chunks"},
      {"steps (this run)", std::to_string(r.steps) + " (" + std::to_string(r.steps_this_run) + ")"},
      {"first / last training loss", r.losses.empty() ? "-" : fmt(r.losses.front().loss, 4) + " / " + fmt(r.losses.back().loss, 4)},
      {"validation loss / perplexity", fmt(r.validation.loss, 4) + " / " + fmt(std::exp(r.validation.loss), 2)},
      {"median step", fmt(r.step_ms, 1) + " ms"},
      {"ideal step (plan, measured stage times)", fmt(r.ideal_step_ms, 1) + " ms"},
      {"bubble measured / ideal", fmt(r.bubble, 3) + " / " + fmt(r.ideal_bubble, 3)},
      {"tokens/s", fmt(r.tokens_per_s, 0)},
      {"parameter norm", fmt(r.param_norm, 3)},
      {"wall time", fmt(r.wall_s, 1) + " s"}};
  write_text(dir / "index.html", index_html("lstm_lm training run", figures, s.placement.to_string() + "\n\n" + r.plan_text));
  return (dir / "index.html").string();
}


}  // namespace lstm_lm
