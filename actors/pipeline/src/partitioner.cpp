#include "strata/pipeline/partitioner.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <stdexcept>

#include "strata/pipeline/simulator.hpp"

namespace strata::pipeline {

namespace {

[[noreturn]] void fail(const std::string& sentence) { throw std::invalid_argument(sentence); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// A non-negative decimal integer filling all of `s`, or -1.
int parse_index(std::string_view s) {
  s = trim(s);
  if (s.empty() || s.size() > 9) return -1;
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return -1;
  return v;
}

std::string range_text(const layer_range& r) {
  return r.first == r.last ? std::to_string(r.first) : std::to_string(r.first) + "-" + std::to_string(r.last);
}

std::vector<layer_range> even_ranges(int layers, int devices) {
  std::vector<layer_range> out;
  int first = 0;
  for (int d = 0; d < devices; ++d) {
    const int n = layers / devices + (d < layers % devices ? 1 : 0);
    out.push_back({first, first + n - 1});
    first += n;
  }
  return out;
}

std::string human_bytes(std::uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / (1ull << 10));
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

std::string millis(double seconds) {
  char buf[32];
  const double ms = seconds * 1e3;
  std::snprintf(buf, sizeof buf, ms >= 100 ? "%.0f ms" : (ms >= 10 ? "%.1f ms" : "%.2f ms"), ms);
  return buf;
}

/// Per stage: the peak (micro-batch, chunk) units whose activations the schedule keeps at
/// once, from the plan's order (no costs needed).
std::vector<int> peak_units(const plan& p) {
  std::vector<int> peak;
  for (const auto& actions : p.stages) {
    int now = 0;
    int most = 0;
    for (const auto& a : actions) {
      if (a.kind == action_kind::forward) most = std::max(most, ++now);
      if (a.kind == action_kind::backward) --now;
    }
    peak.push_back(most);
  }
  return peak;
}

/// The sums a stage's numbers come from, over lstm[i, j) plus the end layers it holds.
struct segment_costs {
  const model_costs& model;
  int devices;
  std::vector<int> in_flight_units;
  int chunks;
  std::vector<double> prefix_time;            // forward + backward
  std::vector<long double> prefix_resident;   // bytes, as long double: sums never overflow
  std::vector<long double> prefix_activation;

  segment_costs(const model_costs& m, int d, std::vector<int> units, int c)
      : model(m), devices(d), in_flight_units(std::move(units)), chunks(c) {
    prefix_time.push_back(0);
    prefix_resident.push_back(0);
    prefix_activation.push_back(0);
    for (const auto& l : m.lstm) {
      prefix_time.push_back(prefix_time.back() + l.forward_s + l.backward_s);
      prefix_resident.push_back(prefix_resident.back() + l.memory_bytes);
      prefix_activation.push_back(prefix_activation.back() + l.activation_bytes);
    }
  }
  double time(int d, int i, int j) const {
    double t = prefix_time[static_cast<std::size_t>(j)] - prefix_time[static_cast<std::size_t>(i)];
    if (d == 0) t += model.embedding.forward_s + model.embedding.backward_s;
    if (d == devices - 1) t += model.decoder.forward_s + model.decoder.backward_s;
    return t;
  }
  long double memory(int d, int i, int j) const {
    long double resident = prefix_resident[static_cast<std::size_t>(j)] - prefix_resident[static_cast<std::size_t>(i)];
    long double act = prefix_activation[static_cast<std::size_t>(j)] - prefix_activation[static_cast<std::size_t>(i)];
    if (d == 0) resident += model.embedding.memory_bytes, act += model.embedding.activation_bytes;
    if (d == devices - 1) resident += model.decoder.memory_bytes, act += model.decoder.activation_bytes;
    return resident + std::ceil(act * in_flight_units[static_cast<std::size_t>(d)] / chunks);
  }
};

/// The links a placement pays for: none when `ranks` is empty (every device on one rank).
struct link_costs {
  std::vector<int> ranks;
  int num_ranks = 1;
  link_model link;

  bool active() const noexcept { return !ranks.empty(); }
  bool crosses(int d) const {  // the cut between devices d and d + 1 joins two ranks
    return active() && ranks[static_cast<std::size_t>(d)] != ranks[static_cast<std::size_t>(d + 1)];
  }
  /// Per micro-batch, one direction: how long the cut after LSTM layer `last` (between devices d
  /// and d + 1) occupies the link; 0 inside a rank.
  double transfer(const model_costs& model, int d, int last) const {
    if (!crosses(d)) return 0;
    return static_cast<double>(model.lstm[static_cast<std::size_t>(last)].output_bytes) / link.bytes_per_s;
  }
};

/// Per-stage forward and backward times (per micro-batch) of a split, as the simulator takes them.
cost_model stage_costs(const model_costs& model, const std::vector<layer_range>& ranges) {
  cost_model costs;
  const auto D = ranges.size();
  for (std::size_t d = 0; d < D; ++d) {
    double f = 0, b = 0;
    for (int l = ranges[d].first; l <= ranges[d].last; ++l) {
      f += model.lstm[static_cast<std::size_t>(l)].forward_s;
      b += model.lstm[static_cast<std::size_t>(l)].backward_s;
    }
    if (d == 0) f += model.embedding.forward_s, b += model.embedding.backward_s;
    if (d == D - 1) f += model.decoder.forward_s, b += model.decoder.backward_s;
    costs.forward.push_back(f);
    costs.backward.push_back(b);
  }
  return costs;
}

/// `stage_costs` with the links' latency and transfers on the cuts between ranks.
cost_model linked_costs(const model_costs& model, const std::vector<layer_range>& ranges, const link_costs& links) {
  cost_model costs = stage_costs(model, ranges);
  if (!links.active()) return costs;
  auto linked = with_links(std::move(costs), {links.ranks, links.num_ranks}, boundary_bytes_of(model, ranges), links.link);
  if (!linked) fail(linked.error().message());
  return std::move(*linked);
}

/// The largest of the stages' forward + backward and the cuts' link transfers: the throughput
/// bound of a split when every stage and every link direction is a resource of its own.
double linked_bottleneck(const model_costs& model, const std::vector<layer_range>& ranges, const link_costs& links) {
  double worst = bottleneck_of(model, ranges);
  for (std::size_t d = 0; d + 1 < ranges.size(); ++d)
    worst = std::max(worst, links.transfer(model, static_cast<int>(d), ranges[d].last));
  return worst;
}

/// The split `auto` settles on, starting from the dynamic programme's (the smallest bottleneck):
/// the split whose plan simulates the shortest step, ties to the smaller bottleneck, then to the
/// start. With few micro-batches the step is not the bottleneck times a count: one micro-batch
/// under GPipe or wavefront runs every stage's forward, then every backward, so the step is about
/// the largest forward plus the largest backward, and a decoder whose backward runs inside its
/// forward (fused loss) moves the best split. Exact over every split when there are at most
/// `exhaustive_limit` of them; otherwise boundary moves of one layer while they shorten the step.
std::vector<layer_range> refine_by_simulation(const plan& p, const model_costs& model, const segment_costs& sums,
                                              const std::vector<device_slot>& devices, const link_costs& links,
                                              std::vector<layer_range> start) {
  constexpr double exhaustive_limit = 4096;
  const int D = static_cast<int>(start.size());
  const int L = static_cast<int>(model.lstm.size());
  auto fits = [&](const std::vector<layer_range>& r) {
    for (int d = 0; d < D; ++d)
      if (sums.memory(d, r[static_cast<std::size_t>(d)].first, r[static_cast<std::size_t>(d)].last + 1) >
          static_cast<long double>(devices[static_cast<std::size_t>(d)].memory_limit))
        return false;
    return true;
  };
  auto score = [&](const std::vector<layer_range>& r) {
    auto sim = simulate(p, linked_costs(model, r, links));
    if (!sim) fail("a candidate placement's plan did not simulate: " + sim.error().message());
    return std::pair{sim->makespan, linked_bottleneck(model, r, links)};
  };
  auto better = [](const std::pair<double, double>& a, const std::pair<double, double>& b) {
    const double tol = 1e-9 * std::max(std::abs(a.first), std::abs(b.first));
    if (a.first < b.first - tol) return true;
    return a.first <= b.first + tol && a.second < b.second * (1 - 1e-12);
  };
  auto best = start;
  auto best_score = score(best);
  double splits = 1;  // C(L-1, D-1)
  for (int k = 1; k < D; ++k) splits = splits * (L - k) / k;
  if (splits <= exhaustive_limit) {
    std::vector<layer_range> cur;
    std::function<void(int)> visit = [&](int first) {
      if (static_cast<int>(cur.size()) == D - 1) {
        cur.push_back({first, L - 1});
        if (fits(cur))
          if (auto sc = score(cur); better(sc, best_score)) best = cur, best_score = sc;
        cur.pop_back();
        return;
      }
      for (int last = first; last <= L - (D - static_cast<int>(cur.size())); ++last) {
        cur.push_back({first, last});
        visit(last + 1);
        cur.pop_back();
      }
    };
    visit(0);
    return best;
  }
  for (bool moved = true; moved;) {
    moved = false;
    for (int d = 0; d + 1 < D; ++d)
      for (int step : {-1, 1}) {
        auto cand = best;
        auto& a = cand[static_cast<std::size_t>(d)];
        auto& b = cand[static_cast<std::size_t>(d + 1)];
        a.last += step;
        b.first += step;
        if (a.last < a.first || b.first > b.last || !fits(cand)) continue;
        if (auto sc = score(cand); better(sc, best_score)) best = cand, best_score = sc, moved = true;
      }
  }
  return best;
}

/// Fails unless `model` has LSTM layers, at least as many as `devices` (at least one), and every
/// measured time is finite and non-negative.
void check_model_and_devices(const model_costs& model, int D) {
  const int L = static_cast<int>(model.lstm.size());
  if (D < 1) fail("cannot place layers on an empty device list");
  if (L < 1) fail("cannot place a model without LSTM layers");
  if (D > L)
    fail("cannot place " + std::to_string(L) + " LSTM layers on " + std::to_string(D) +
         " devices: every device needs at least one LSTM layer");
  auto check_time = [](const layer_cost& c, const std::string& what) {
    if (!(c.forward_s >= 0) || !(c.backward_s >= 0) || !std::isfinite(c.forward_s + c.backward_s))
      fail("the measured times of " + what + " must be finite and non-negative");
  };
  check_time(model.embedding, "the embedding");
  check_time(model.decoder, "the decoder");
  for (int l = 0; l < L; ++l) check_time(model.lstm[static_cast<std::size_t>(l)], "LSTM layer " + std::to_string(l));
}

/// The links between ranks the cuts pay (none when `cross` names no ranks), checked.
link_costs links_of(const cross_rank_links& cross, int D) {
  link_costs links;
  if (!cross.placement.ranks.empty()) {
    if (auto err = check_link(cross.link)) fail(err.message());
    if (auto err = check_rank_placement(cross.placement, D)) fail(err.message());
    links = {cross.placement.ranks, cross.placement.num_ranks, cross.link};
  }
  return links;
}

/// The ranges of an even or explicit partition: one per device, covering every layer in order,
/// each fitting its device's memory.
std::vector<layer_range> given_ranges(const partition_spec& spec, const segment_costs& sums,
                                      const std::vector<device_slot>& devices, int L) {
  const int D = static_cast<int>(devices.size());
  std::vector<layer_range> ranges = spec.ranges;
  const bool fits = static_cast<int>(ranges.size()) == D && !ranges.empty() && ranges.front().first == 0 &&
                    ranges.back().last == L - 1 &&
                    std::adjacent_find(ranges.begin(), ranges.end(), [](const layer_range& a, const layer_range& b) {
                      return b.first != a.last + 1;
                    }) == ranges.end() &&
                    std::all_of(ranges.begin(), ranges.end(), [](const layer_range& r) { return r.first <= r.last; });
  if (!fits)
    fail("the partition names " + std::to_string(ranges.size()) + " ranges that do not cover LSTM layers 0-" +
         std::to_string(L - 1) + " on " + std::to_string(D) + " devices; parse it with parse_partition for this model");
  for (int d = 0; d < D; ++d) {
    const auto& r = ranges[static_cast<std::size_t>(d)];
    const long double need = sums.memory(d, r.first, r.last + 1);
    const auto& dev = devices[static_cast<std::size_t>(d)];
    if (need > static_cast<long double>(dev.memory_limit))
      fail("stage " + std::to_string(d) + " (lstm " + range_text(r) + ") needs " +
           human_bytes(static_cast<std::uint64_t>(need)) + " but device " + dev.name + " has " +
           human_bytes(dev.memory_limit));
  }
  return ranges;
}

/// The contiguous split with the smallest bottleneck (stage time, or a cut's link) that fits
/// every device's memory, by dynamic programming over (devices, layers); among optima the later
/// stages stay as small as possible.
std::vector<layer_range> balanced_ranges(const model_costs& model, const segment_costs& sums,
                                         const std::vector<device_slot>& devices, const link_costs& links) {
  const int L = static_cast<int>(model.lstm.size());
  const int D = static_cast<int>(devices.size());
  // best[d][j]: the smallest bottleneck placing lstm[0, j) on devices 0..d-1, device d-1
  // ending at j; cut[d][j] the start of device d-1's range in that optimum.
  constexpr double inf = std::numeric_limits<double>::infinity();
  const auto Ds = static_cast<std::size_t>(D);
  const auto Ls = static_cast<std::size_t>(L);
  std::vector<std::vector<double>> best(Ds + 1, std::vector<double>(Ls + 1, inf));
  std::vector<std::vector<int>> cut(Ds + 1, std::vector<int>(Ls + 1, -1));
  best[0][0] = 0;
  for (int d = 1; d <= D; ++d) {
    const int dev = d - 1;
    const auto limit = static_cast<long double>(devices[static_cast<std::size_t>(dev)].memory_limit);
    for (int j = d; j <= L - (D - d); ++j) {
      // Largest cut first, with a strict improvement to replace it: among optima the
      // later stages stay as small as possible.
      for (int i = j - 1; i >= d - 1; --i) {
        const double before = best[static_cast<std::size_t>(d - 1)][static_cast<std::size_t>(i)];
        if (before == inf || sums.memory(dev, i, j) > limit) continue;
        double worst = std::max(before, sums.time(dev, i, j));
        if (dev > 0) worst = std::max(worst, links.transfer(model, dev - 1, i - 1));  // the cut before it
        if (worst < best[static_cast<std::size_t>(d)][static_cast<std::size_t>(j)]) {
          best[static_cast<std::size_t>(d)][static_cast<std::size_t>(j)] = worst;
          cut[static_cast<std::size_t>(d)][static_cast<std::size_t>(j)] = i;
        }
      }
    }
  }
  if (best[Ds][Ls] == inf) {
    std::string names;
    for (const auto& dev : devices) names += (names.empty() ? "" : ", ") + dev.name + " " + human_bytes(dev.memory_limit);
    fail("no contiguous split of " + std::to_string(L) + " LSTM layers (with embedding and decoder) fits in the memory of " +
         std::to_string(D) + " devices (" + names + ")");
  }
  std::vector<layer_range> ranges(Ds);
  int j = L;
  for (int d = D; d >= 1; --d) {
    const int i = cut[static_cast<std::size_t>(d)][static_cast<std::size_t>(j)];
    ranges[static_cast<std::size_t>(d - 1)] = {i, j - 1};
    j = i;
  }
  return ranges;
}

/// Stage `d` of the placement on `ranges`: its device, layers, times with `costs`, memory and
/// the link its output crosses.
stage_placement placed_stage(int d, const model_costs& model, const std::vector<layer_range>& ranges, const cost_model& costs,
                             const segment_costs& sums, const std::vector<device_slot>& devices, const link_costs& links,
                             const pipeline_shape& shape) {
  const int D = static_cast<int>(devices.size());
  const auto& r = ranges[static_cast<std::size_t>(d)];
  stage_placement st;
  st.device = d;
  st.device_name = devices[static_cast<std::size_t>(d)].name;
  st.has_embedding = d == 0;
  st.has_decoder = d == D - 1;
  st.lstm = r;
  st.forward_s = costs.forward[static_cast<std::size_t>(d)];
  st.backward_s = costs.backward[static_cast<std::size_t>(d)];
  st.memory_bytes = static_cast<std::uint64_t>(std::min<long double>(sums.memory(d, r.first, r.last + 1),
                                                                     static_cast<long double>(UINT64_MAX)));
  st.memory_limit = devices[static_cast<std::size_t>(d)].memory_limit;
  st.step_s = shape.micro_batches * (st.forward_s + st.backward_s);
  if (links.active()) st.rank = links.ranks[static_cast<std::size_t>(d)];
  if (d + 1 < D) {
    st.output_bytes = model.lstm[static_cast<std::size_t>(r.last)].output_bytes;
    if (links.crosses(d)) st.link_s = links.link.seconds(static_cast<double>(st.output_bytes));
  }
  return st;
}

}  // namespace

partition_spec parse_partition(std::string_view text, int lstm_layers, int devices) {
  const std::string quoted = "partition '" + std::string(text) + "'";
  if (lstm_layers < 1) fail("cannot partition a model with " + std::to_string(lstm_layers) + " LSTM layers; it needs at least 1");
  if (devices < 1) fail("cannot partition onto " + std::to_string(devices) + " devices; it needs at least 1");
  if (devices > lstm_layers)
    fail("cannot place " + std::to_string(lstm_layers) + " LSTM layers on " + std::to_string(devices) +
         " devices: every device needs at least one LSTM layer");
  const std::string_view t = trim(text);
  partition_spec spec;
  if (t == "auto") return spec;
  if (t == "even") {
    spec.kind = partition_spec::kind_t::even;
    spec.ranges = even_ranges(lstm_layers, devices);
    return spec;
  }
  if (t.empty()) fail(quoted + " is empty; expected auto, even or LSTM layer ranges such as 0-3,4-7");

  spec.kind = partition_spec::kind_t::explicit_ranges;
  std::size_t from = 0;
  while (from <= t.size()) {
    const std::size_t comma = std::min(t.find(',', from), t.size());
    const std::string_view item = trim(t.substr(from, comma - from));
    from = comma + 1;
    const std::size_t dash = item.find('-');
    layer_range r;
    r.first = parse_index(item.substr(0, dash));
    r.last = dash == std::string_view::npos ? r.first : parse_index(item.substr(dash + 1));
    if (r.first < 0 || r.last < 0)
      fail(quoted + " has '" + std::string(item) + "' where a range of LSTM layers such as 4-7 was expected (or auto, even)");
    if (r.first > r.last) fail(quoted + " has range " + std::string(item) + " whose first layer is after its last");
    spec.ranges.push_back(r);
  }
  int next = 0;
  for (const auto& r : spec.ranges) {
    if (r.last >= lstm_layers)
      fail(quoted + " names LSTM layer " + std::to_string(r.last) + " but the model has " + std::to_string(lstm_layers) +
           " (0-" + std::to_string(lstm_layers - 1) + ")");
    if (r.first > next) fail(quoted + " leaves LSTM layer " + std::to_string(next) + " unassigned");
    if (r.first < next)
      fail(quoted + " assigns LSTM layer " + std::to_string(r.first) + " twice (ranges must follow each other in device order)");
    next = r.last + 1;
  }
  if (next < lstm_layers) fail(quoted + " leaves LSTM layer " + std::to_string(next) + " unassigned");
  if (static_cast<int>(spec.ranges.size()) != devices)
    fail(quoted + " names " + std::to_string(spec.ranges.size()) + " ranges for " + std::to_string(devices) +
         " devices; expected one range per device");
  return spec;
}

double bottleneck_of(const model_costs& model, const std::vector<layer_range>& ranges) {
  const segment_costs sums(model, static_cast<int>(ranges.size()), std::vector<int>(ranges.size(), 0), 1);
  double worst = 0;
  for (std::size_t d = 0; d < ranges.size(); ++d)
    worst = std::max(worst, sums.time(static_cast<int>(d), ranges[d].first, ranges[d].last + 1));
  return worst;
}

std::vector<double> boundary_bytes_of(const model_costs& model, const std::vector<layer_range>& ranges) {
  std::vector<double> out;
  for (std::size_t d = 0; d + 1 < ranges.size(); ++d) {
    const int last = ranges[d].last;
    if (last < 0 || last >= static_cast<int>(model.lstm.size()))
      fail("the split names LSTM layer " + std::to_string(last) + " but the model has " +
           std::to_string(model.lstm.size()));
    out.push_back(static_cast<double>(model.lstm[static_cast<std::size_t>(last)].output_bytes));
  }
  return out;
}

placement place_layers(const model_costs& model, const std::vector<device_slot>& devices, const partition_spec& spec,
                       const pipeline_shape& shape) {
  return place_layers(model, devices, spec, shape, cross_rank_links{});
}

placement place_layers(const model_costs& model, const std::vector<device_slot>& devices, const partition_spec& spec,
                       const pipeline_shape& shape, const cross_rank_links& cross) {
  const int L = static_cast<int>(model.lstm.size());
  const int D = static_cast<int>(devices.size());
  check_model_and_devices(model, D);
  const link_costs links = links_of(cross, D);
  // Also validates the shape (stage, micro-batch and chunk counts) with make_plan's sentences.
  const plan p = make_plan(shape.schedule, D, shape.micro_batches, shape.chunks);
  const segment_costs sums(model, D, peak_units(p), shape.chunks);
  const std::vector<layer_range> ranges =
      spec.kind != partition_spec::kind_t::automatic
          ? given_ranges(spec, sums, devices, L)
          : refine_by_simulation(p, model, sums, devices, links, balanced_ranges(model, sums, devices, links));

  placement out;
  out.shape = shape;
  const cost_model costs = linked_costs(model, ranges, links);
  for (int d = 0; d < D; ++d) {
    out.stages.push_back(placed_stage(d, model, ranges, costs, sums, devices, links, shape));
    out.across_ranks = out.across_ranks || (d + 1 < D && links.crosses(d));
  }
  for (int d = 1; d < D; ++d) {
    const auto& a = out.stages[static_cast<std::size_t>(d)];
    const auto& b = out.stages[static_cast<std::size_t>(out.slowest_stage)];
    if (a.forward_s + a.backward_s > b.forward_s + b.backward_s) out.slowest_stage = d;
  }
  auto sim = simulate(p, costs);
  if (!sim) fail("the placement's plan did not simulate: " + sim.error().message());
  out.predicted_step_s = sim->makespan;
  out.predicted_bubble = sim->bubble;
  return out;
}

std::string placement::to_string() const {
  std::ostringstream os;
  for (const auto& st : stages) {
    os << "stage " << st.device << " (" << st.device_name;
    if (across_ranks) os << ", rank " << st.rank;
    os << "): ";
    if (st.has_embedding) os << "embedding + ";
    os << "lstm " << range_text(st.lstm);
    if (st.has_decoder) os << " + decoder";
    os << ", " << millis(st.step_s) << "/step (" << millis(st.forward_s + st.backward_s) << " per micro-batch), "
       << human_bytes(st.memory_bytes);
    if (st.memory_limit != std::numeric_limits<std::uint64_t>::max()) os << " of " << human_bytes(st.memory_limit);
    if (st.link_s > 0) os << "; to rank " << stages[static_cast<std::size_t>(st.device + 1)].rank << ": "
                          << human_bytes(st.output_bytes) << " per micro-batch, " << millis(st.link_s);
    os << '\n';
  }
  char bubble[16];
  std::snprintf(bubble, sizeof bubble, "%.1f%%", predicted_bubble * 100);
  os << "slowest stage " << slowest_stage << "; predicted step " << millis(predicted_step_s) << " with "
     << pipeline::to_string(shape.schedule) << ", " << shape.micro_batches << " micro-batches";
  if (shape.chunks > 1) os << " x " << shape.chunks << " chunks";
  os << ": bubble " << bubble << '\n';
  return os.str();
}

}  // namespace strata::pipeline
