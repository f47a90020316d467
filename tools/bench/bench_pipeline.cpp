// strata-bench-pipeline: the model-parallel LSTM LM through stage actors.
//
//   sim: every schedule on simulated H200s (modelled device time): measured step vs the plan's
//        ideal step (runtime cost), measured bubble vs the plan's bubble.
//   cpu: tokens/s of the seed configuration on cpu:2 against PyTorch's CPU step, same run.
//
//   strata-bench-pipeline [--mode sim|cpu|all] [--steps N] [--json] ...
//
// With --link-latency-us / --link-gbps (strata-bench-net's link_latency_us and link_gbps) and
// --placement (stage -> rank, e.g. 0,0,1,1; default one stage per rank), each sim row also
// gives the plan's ideal step with the stages on those ranks: every cut between two ranks pays
// the link for each activation and gradient (docs/pipeline.md, "Link costs between ranks").

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "strata/lm/pipeline.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/kernels/blas.hpp"
#include "strata/strata.hpp"
#include "torch_anchor.hpp"
#include "strata/stats.hpp"

namespace {

using strata::median;

using strata::lm::lm_pipeline;
using strata::pipeline::schedule_kind;

struct run_figures {
  std::string schedule;
  std::size_t stages = 0, micro_batches = 0, chunks = 0;
  double step_ms = 0;        // measured (modelled-time equivalent for sim)
  double ideal_step_ms = 0;  // the plan with the measured device times, no runtime cost
  double bubble = 0;         // measured
  double ideal_bubble = 0;   // the plan's
  double tokens_per_s = 0;
  bool shared = false;  // cpu: the stage devices share every core
  double linked_step_ms = -1;  // the ideal step with the link costs between ranks (sim, with --link-*)
};

/// Where the stages run and what a link between ranks costs (from the --link-* flags).
struct link_setup {
  strata::pipeline::rank_placement placement;
  strata::pipeline::link_model link;
};

/// The plan's ideal step with the device times of `r` and the link on every cut between ranks:
/// lm_pipeline::ideal's cost model (in seconds) plus `strata::pipeline::with_links`. Each cut
/// carries one micro-batch's hidden state sequence, [T, B/M, H] floats, and its gradient back.
double linked_ideal_ms(const lm_pipeline& p, const strata::lm::step_result& r, const link_setup& links) {
  strata::pipeline::cost_model costs;
  for (double f : r.stage_forward_ms) costs.forward.push_back(f * 1e-3);
  for (double b : r.stage_backward_ms) costs.backward.push_back(b * 1e-3);
  for (double o : r.stage_other_ms) costs.push_gradients = std::max(costs.push_gradients, o * 1e-3);
  const auto& c = p.config();
  const double bytes = static_cast<double>(c.seq * c.micro_batch_size() * c.hidden * sizeof(float));
  auto linked = strata::pipeline::with_links(std::move(costs), links.placement,
                                             std::vector<double>(p.stages() - 1, bytes), links.link);
  if (!linked) throw std::runtime_error(linked.error().message());
  auto sim = strata::pipeline::simulate(p.plan(), *linked);
  if (!sim) throw std::runtime_error(sim.error().message());
  return sim->makespan * 1e3 + r.store_busy_ms;
}

/// `--placement 0,0,1,1`: one rank per stage, the ranks numbered 0..R-1 with none left out; the
/// first problem as one sentence.
std::optional<std::string> parse_placement(const std::string& text, int stages, strata::pipeline::rank_placement& out) {
  const std::string quoted = "--placement '" + text + "'";
  out = {};
  std::size_t from = 0;
  while (from <= text.size()) {
    const std::size_t comma = std::min(text.find(',', from), text.size());
    const std::string item = text.substr(from, comma - from);
    from = comma + 1;
    int rank = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), rank);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || rank < 0 || rank > 4096)
      return quoted + " has '" + item + "' where a rank (0, 1, ...) was expected; give one rank per stage, e.g. 0,0,1,1";
    out.ranks.push_back(rank);
  }
  if (static_cast<int>(out.ranks.size()) != stages)
    return quoted + " names " + std::to_string(out.ranks.size()) + " ranks for " + std::to_string(stages) +
           " stages (--sim-stages); expected one rank per stage";
  out.num_ranks = *std::max_element(out.ranks.begin(), out.ranks.end()) + 1;
  for (int r = 0; r < out.num_ranks; ++r)
    if (std::find(out.ranks.begin(), out.ranks.end(), r) == out.ranks.end())
      return quoted + " names rank " + std::to_string(out.num_ranks - 1) + " but no stage on rank " +
             std::to_string(r) + "; number the ranks 0.." + std::to_string(out.num_ranks - 1) + " with none left out";
  return std::nullopt;
}

std::vector<std::size_t> even_counts(std::size_t layers, std::size_t stages) {
  std::vector<std::size_t> c(stages, layers / stages);
  for (std::size_t i = 0; i < layers % stages; ++i) ++c[i];
  return c;
}

run_figures run(strata::actor_system& sys, std::vector<strata::device> devices, strata::device store,
                const strata::lm::config& c, schedule_kind kind, int steps, double time_scale,
                const std::optional<link_setup>& links = std::nullopt) {
  const std::size_t S = devices.size();
  lm_pipeline p(sys, std::move(devices), c, kind, even_counts(c.layers, S), strata::lm::lm_pipeline_options{.store_device = store});
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(c.vocab) - 1);
  std::vector<std::int32_t> tokens(c.seq * c.batch), targets(c.seq * c.batch);
  std::vector<double> step, ideal, bubble, ideal_bubble, linked;
  for (int s = 0; s < steps + 1; ++s) {  // the first step warms up
    for (auto& t : tokens) t = id(rng);
    for (auto& t : targets) t = id(rng);
    auto r = p.train_step(tokens, targets);
    if (!r) throw std::runtime_error(r.error().message());
    if (s == 0) continue;
    auto i = p.ideal(*r);
    if (!i) throw std::runtime_error(i.error().message());
    // Device times are modelled on sim (time_scale wall ms per modelled ms) and real on cpu.
    const double wall = r->step_ms / time_scale;
    double busy = 0;
    for (double b : r->stage_busy_ms) busy += b;
    step.push_back(wall);
    ideal.push_back(i->step_ms);
    bubble.push_back(1.0 - busy / (static_cast<double>(S) * wall));
    ideal_bubble.push_back(i->bubble);
    if (links) linked.push_back(linked_ideal_ms(p, *r, *links));
  }
  run_figures f;
  f.schedule = strata::pipeline::to_string(kind);
  f.stages = S;
  f.micro_batches = c.micro_batches;
  f.chunks = c.chunks;
  f.step_ms = median(step);
  f.ideal_step_ms = median(ideal);
  f.bubble = median(bubble);
  f.ideal_bubble = median(ideal_bubble);
  if (links) f.linked_step_ms = median(linked);
  f.tokens_per_s = static_cast<double>(c.seq * c.batch) / (f.step_ms / 1e3);
  return f;
}

nlohmann::json to_json(const run_figures& f) {
  nlohmann::json j = {{"schedule", f.schedule},       {"stages", f.stages},
          {"micro_batches", f.micro_batches}, {"chunks", f.chunks},
          {"step_ms", f.step_ms},         {"ideal_step_ms", f.ideal_step_ms},
          {"step_over_ideal", f.step_ms / f.ideal_step_ms},
          {"bubble", f.bubble},           {"ideal_bubble", f.ideal_bubble},
          {"tokens_per_s", f.tokens_per_s},  {"shared_cores", f.shared}};
  if (f.linked_step_ms >= 0) j["linked_ideal_step_ms"] = f.linked_step_ms;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-bench-pipeline: the LSTM LM through stage actors (sim and cpu devices)"};
  std::string mode = "all";
  int steps = 3;
  int sim_stages = 8;
  std::size_t sim_micro_batches = 8, sim_batch = 32, chunks = 5;
  double time_scale = 1000;
  int torch_threads = 2;
  bool no_torch = false, json = false;
  std::size_t layers = 8, hidden = 400;
  app.add_option("--mode", mode, "sim, cpu or all")->check(CLI::IsMember({"sim", "cpu", "all"}));
  app.add_option("--steps", steps, "measured steps per configuration (after one warm-up)")->check(CLI::Range(1, 1000));
  app.add_option("--sim-stages", sim_stages, "simulated H200s")->check(CLI::Range(1, 64));
  app.add_option("--sim-micro-batches", sim_micro_batches, "micro-batches on sim")->check(CLI::Range(1, 256));
  app.add_option("--sim-batch", sim_batch, "global batch on sim (divisible by the micro-batches)")->check(CLI::Range(1, 4096));
  app.add_option("--chunks", chunks, "wavefront chunks (divides the sequence of 35)")->check(CLI::Range(1, 35));
  app.add_option("--sim-time-scale", time_scale, "wall seconds per modelled second on sim")->check(CLI::Range(1.0, 1e6));
  app.add_option("--layers", layers, "LSTM layers")->check(CLI::Range(1, 64));
  app.add_option("--hidden", hidden, "hidden size")->check(CLI::Range(1, 8192));
  app.add_option("--torch-threads", torch_threads, "threads of the PyTorch anchor")->check(CLI::Range(1, 256));
  app.add_flag("--no-torch", no_torch, "skip the PyTorch anchor");
  app.add_flag("--json", json, "print one JSON object on one line");
  double link_latency_us = 0, link_gbps = std::numeric_limits<double>::infinity();
  std::string placement_text;
  auto* latency_flag = app.add_option("--link-latency-us", link_latency_us,
                 "sim: one-way latency of a link between ranks, microseconds (strata-bench-net's link_latency_us)");
  auto* gbps_flag = app.add_option("--link-gbps", link_gbps, "sim: bandwidth of a link between ranks, GB/s (strata-bench-net's link_gbps)");
  app.add_option("--placement", placement_text, "sim: each stage's rank, e.g. 0,0,1,1 (default with a link: one stage per rank)");
  CLI11_PARSE(app, argc, argv);
  if (std::isnan(time_scale)) {  // CLI::Range lets NaN through: every comparison with it is false
    std::fprintf(stderr, "strata-bench-pipeline: --sim-time-scale must be a number from 1 to 1e6, not nan\n");
    return 2;
  }
  std::optional<link_setup> links;
  if (latency_flag->count() > 0 || gbps_flag->count() > 0 || !placement_text.empty()) {
    link_setup l;
    const double us = link_latency_us;
    const double gbps = link_gbps;
    if (!(us >= 0) || !std::isfinite(us)) {
      std::fprintf(stderr, "strata-bench-pipeline: --link-latency-us must be a finite number of microseconds >= 0, not %g\n", us);
      return 2;
    }
    if (!(gbps > 0)) {
      std::fprintf(stderr, "strata-bench-pipeline: --link-gbps must be a positive number of GB/s, not %g\n", gbps);
      return 2;
    }
    l.link = strata::pipeline::link_model::measured(us, gbps);
    if (placement_text.empty()) {
      for (int s = 0; s < sim_stages; ++s) l.placement.ranks.push_back(s);
      l.placement.num_ranks = sim_stages;
    } else if (auto why = parse_placement(placement_text, sim_stages, l.placement)) {
      std::fprintf(stderr, "strata-bench-pipeline: %s\n", why->c_str());
      return 2;
    }
    if (mode == "cpu") {
      std::fprintf(stderr, "strata-bench-pipeline: --link-latency-us, --link-gbps and --placement apply to --mode sim or all\n");
      return 2;
    }
    links = l;
  }

  try {
    strata::kernels::cpu::set_blas_threads(1);
    nlohmann::json out;
    strata::actor_system sys(strata::system_config{.worker_threads = 2});
    if (mode == "sim" || mode == "all") {
      strata::lm::config c;
      c.layers = layers;
      c.hidden = hidden;
      c.batch = sim_batch;
      c.micro_batches = sim_micro_batches;
      strata::device_manager manager({.sim_time_scale = time_scale});
      std::vector<run_figures> rows;
      for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::wavefront}) {
        strata::lm::config cc = c;
        cc.chunks = kind == schedule_kind::wavefront ? chunks : 1;
        auto devs = manager.create("sim:" + std::to_string(sim_stages + 1) + ":h200");
        strata::device store = devs.back();
        devs.pop_back();
        rows.push_back(run(sys, devs, store, cc, kind, steps, time_scale, links));
      }
      if (!json) {
        std::printf("sim: %d simulated H200s, seed LM (L=%zu H=%zu B=%zu), %zu micro-batches, time scale %.0f\n",
                    sim_stages, layers, hidden, sim_batch, sim_micro_batches, time_scale);
        std::printf("| schedule | step (modelled ms) | ideal step | step / ideal | measured bubble | plan's bubble |%s\n",
                    links ? " ideal step with links |" : "");
        std::printf("|---|---:|---:|---:|---:|---:|%s\n", links ? "---:|" : "");
        for (auto& r : rows) {
          std::printf("| %s%s | %.3f | %.3f | %.3f | %.1f %% | %.1f %% |", r.schedule.c_str(),
                      r.chunks > 1 ? (" C=" + std::to_string(r.chunks)).c_str() : "", r.step_ms, r.ideal_step_ms,
                      r.step_ms / r.ideal_step_ms, 100 * r.bubble, 100 * r.ideal_bubble);
          if (links) std::printf(" %.3f |", r.linked_step_ms);
          std::printf("\n");
        }
        if (links) {
          std::string where;
          for (int rank : links->placement.ranks) where += (where.empty() ? "" : ",") + std::to_string(rank);
          std::printf("links between ranks: %g us + bytes / %g GB/s, stages on ranks %s, %zu B per activation\n",
                      links->link.latency_s * 1e6, links->link.bytes_per_s / 1e9, where.c_str(),
                      c.seq * c.micro_batch_size() * c.hidden * sizeof(float));
        }
      }
      out["sim"] = nlohmann::json::array();
      for (auto& r : rows) out["sim"].push_back(to_json(r));
      if (links) {
        out["link"] = {{"latency_us", links->link.latency_s * 1e6},
                       {"gbps", std::isinf(links->link.bytes_per_s) ? nlohmann::json(nullptr)
                                                                     : nlohmann::json(links->link.bytes_per_s / 1e9)},
                       {"placement", links->placement.ranks}};
      }
    }
    if (mode == "cpu" || mode == "all") {
      strata::lm::config c;
      c.layers = layers;
      c.hidden = hidden;
      std::vector<run_figures> rows;
      struct variant {
        schedule_kind kind;
        std::size_t mb, chunks;
        bool shared;  // each device may use every hardware thread (lstm_lm's default) or its share
      };
      const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      for (auto v : {variant{schedule_kind::gpipe, 1, 1, false}, variant{schedule_kind::one_f_one_b, 2, 1, false},
                     variant{schedule_kind::wavefront, 1, chunks, false}, variant{schedule_kind::one_f_one_b, 1, 1, true},
                     variant{schedule_kind::wavefront, 1, chunks, true}}) {
        strata::lm::config cc = c;
        cc.micro_batches = v.mb;
        cc.chunks = v.chunks;
        rows.push_back(run(sys, strata::make_devices("cpu:2", {.cpu_threads_per_device = v.shared ? hw : 0}), {}, cc,
                           v.kind, steps, 1.0));
        rows.back().shared = v.shared;
      }
      strata::bench::torch_result t;
      if (!no_torch) t = strata::bench::run_torch(torch_threads, 1, std::max(steps, 3));
      if (!json) {
        std::printf("\ncpu:2, seed LM (V=10000 E=200 L=%zu H=%zu B=20 T=35)\n", layers, hidden);
        std::printf("| schedule | step ms | tokens/s | vs PyTorch CPU | measured bubble | plan's bubble |\n");
        std::printf("|---|---:|---:|---:|---:|---:|\n");
        for (auto& r : rows) {
          std::string vs = t.ok ? std::to_string(t.step_ms / r.step_ms).substr(0, 4) + "x" : "n/a";
          std::printf("| %s M=%zu C=%zu, %s | %.1f | %.0f | %s | %.1f %% | %.1f %% |\n", r.schedule.c_str(),
                      r.micro_batches, r.chunks, r.shared ? "shared cores" : "a core each", r.step_ms, r.tokens_per_s,
                      vs.c_str(), 100 * r.bubble, 100 * r.ideal_bubble);
        }
        if (t.ok)
          std::printf("| PyTorch %s CPU (%d threads) | %.1f | %.0f | 1.00x | | |\n", t.version.c_str(), torch_threads,
                      t.step_ms, 700.0 / (t.step_ms / 1e3));
        else if (!no_torch)
          std::printf("PyTorch anchor unavailable: %s\n", t.why.c_str());
      }
      out["cpu"] = nlohmann::json::array();
      for (auto& r : rows) out["cpu"].push_back(to_json(r));
      if (t.ok) out["torch_lm_step_ms"] = t.step_ms;
    }
    if (json) std::printf("%s\n", out.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench-pipeline: %s\n", e.what());
    return 1;
  }
  return 0;
}
