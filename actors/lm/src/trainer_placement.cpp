// Where the layers go: the placement of the LSTM layers on the stages from their costs (measured
// or estimated) and, across ranks, the link between the ranks; every rank places as rank 0 does.
#include "trainer_setup.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "rank_bytes.hpp"
#include "strata/lm/costs.hpp"

namespace strata::lm::detail {

namespace {

namespace pl = strata::pipeline;

/// The link's measurement at the start under mpirun: round trips for the latency, and one transfer
/// of a micro-batch's activation for the bandwidth, at least 4 MiB (a smaller one would time
/// mostly the latency) and at most 64 MiB.
constexpr int link_round_trips = 300;
std::uint64_t link_transfer_bytes(const lm::config& cfg) {
  return std::clamp<std::uint64_t>(layer_memory_costs(cfg).lstm.front().output_bytes, 4ull << 20, 64ull << 20);
}

/// The link between ranks: the --link-* flags, and what ranks 0 and 1 measure for a figure not
/// given (collective then; only rank 0's figures are the measured ones). `note` says which.
rank_link link_between_ranks(const trainer_options& o, const lm::config& cfg, std::string& note) {
  rank_link link;
  std::string measured;
  if (!o.link_latency_us || !o.link_gbps) {
    const std::uint64_t bytes = link_transfer_bytes(cfg);
    auto m = o.ranks->measure_link(bytes, link_round_trips);
    if (!m) throw std::runtime_error("cannot measure the link between ranks 0 and 1: " + m.error().message());
    link = {m->latency_s * 1e6, m->bytes_per_s / 1e9};
    measured = "measured between ranks 0 and 1 (median of " + std::to_string(link_round_trips) +
               " round trips, best of 3 transfers of " + std::to_string(bytes >> 20) + " MiB)";
  }
  if (o.link_latency_us) link.latency_us = *o.link_latency_us;
  if (o.link_gbps) link.gbps = *o.link_gbps;
  if (o.link_latency_us && o.link_gbps) note = "given by --link-latency-us and --link-gbps";
  else if (o.link_latency_us) note = "latency given by --link-latency-us, bandwidth " + measured;
  else if (o.link_gbps) note = "bandwidth given by --link-gbps, latency " + measured;
  else note = measured;
  return link;
}

using json = nlohmann::json;

json layer_json(const pl::layer_cost& c) {
  return json::array({c.forward_s, c.backward_s, c.memory_bytes, c.activation_bytes, c.output_bytes});
}
pl::layer_cost layer_of(const json& j) {
  return {j.at(0).get<double>(), j.at(1).get<double>(), j.at(2).get<std::uint64_t>(), j.at(3).get<std::uint64_t>(),
          j.at(4).get<std::uint64_t>()};
}

/// Collective: `costs` and `costs_note` (when `with_costs`) and `link` (when set) become rank 0's
/// on every rank. Doubles travel as JSON numbers, which read back exactly.
void take_rank0s(rank_group& ranks, bool with_costs, pl::model_costs& costs, std::string& costs_note,
                 std::optional<rank_link>& link) {
  json mine = json::object();
  if (ranks.rank() == 0) {
    if (with_costs) {
      json lstm = json::array();
      for (const auto& l : costs.lstm) lstm.push_back(layer_json(l));
      mine["costs"] = {{"embedding", layer_json(costs.embedding)}, {"lstm", lstm}, {"decoder", layer_json(costs.decoder)}};
      mine["costs_note"] = costs_note;
    }
    if (link) mine["link"] = {link->latency_us, std::isinf(link->gbps) ? json(nullptr) : json(link->gbps)};
  }
  auto text = rank0_bytes(ranks, mine.dump());
  if (!text) throw std::runtime_error("cannot receive rank 0's layer costs and link: " + text.error().message());
  const json got = json::parse(*text);
  if (with_costs) {
    const json& c = got.at("costs");
    costs.embedding = layer_of(c.at("embedding"));
    costs.decoder = layer_of(c.at("decoder"));
    costs.lstm.clear();
    for (const auto& l : c.at("lstm")) costs.lstm.push_back(layer_of(l));
    costs_note = got.at("costs_note").get<std::string>();
  }
  if (link) {
    const json& l = got.at("link");
    link->latency_us = l.at(0).get<double>();
    link->gbps = l.at(1).is_null() ? std::numeric_limits<double>::infinity() : l.at(1).get<double>();
  }
}

/// Collective: fails unless every rank placed the LSTM layers as rank 0 did.
void check_same_placement(rank_group& ranks, const pl::placement& placed) {
  std::string ranges;
  for (const auto& st : placed.stages)
    ranges += (ranges.empty() ? "" : ",") + std::to_string(st.lstm.first) + "-" + std::to_string(st.lstm.last);
  auto all = gather_bytes(ranks, ranges);
  if (!all) throw std::runtime_error("cannot compare the ranks' placements: " + all.error().message());
  for (std::size_t r = 1; r < all->size(); ++r)
    if ((*all)[r] != all->front())
      throw std::runtime_error("rank " + std::to_string(r) + " placed the LSTM layers as " + (*all)[r] + ", rank 0 as " +
                               all->front() + "; every rank must run the same placement");
}

}  // namespace

void place_stages(prepared_run& run, const trainer_options& o, const trainer_events& events) {
  training_setup& su = run.setup;
  const lm::config& cfg = su.model;
  const std::size_t S = run.stages;
  const bool automatic = run.partition.kind == pl::partition_spec::kind_t::automatic;
  const bool rank0 = !o.ranks || o.ranks->rank() == 0;
  const bool across = o.ranks && S > 1;  // cuts between ranks, which pay the link
  // Across ranks each rank knows only its own device: the plan names rank 0's (lstm_lm's ranks
  // are given the same --devices).
  std::vector<pl::device_slot> slots;
  for (std::size_t s = 0; s < S; ++s)
    slots.push_back({!o.ranks ? run.devices[s].name() : across ? run.devices.front().name() : "rank " + std::to_string(s)});
  std::optional<rank_link> link;
  if (across) link = link_between_ranks(o, cfg, su.link_note);
  // auto: per-layer costs measured on the first device (the kernels on one micro-batch, in its
  // arena), across ranks on rank 0's, which every rank then places with; the fixed splits only
  // print a prediction, from FLOPs and bytes.
  const nominal_rates rates;
  su.costs_note = "costs estimated from FLOPs and bytes at nominal rates of " + fixed(rates.flops_per_s / 1e9, 0) +
                  " GFLOP/s and " + fixed(rates.bytes_per_s / 1e9, 0) +
                  " GB/s per device, so the predicted step is a rough guide; --partition auto measures the costs";
  pl::model_costs costs;
  if (automatic && rank0) {
    const auto t0 = std::chrono::steady_clock::now();
    costs = measure_layer_costs(cfg, run.devices.front());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    su.costs_note = std::string("costs measured on ") + (o.ranks ? "rank 0's " : "") + run.devices.front().name() + " in " +
                    fixed(ms, 0) + " ms";
  } else if (!automatic) {
    costs = estimate_layer_costs(cfg, rates);
  }
  if (o.ranks && (automatic || link)) take_rank0s(*o.ranks, automatic, costs, su.costs_note, link);
  if (automatic && events.on_costs_measured) events.on_costs_measured(costs, su.costs_note);
  pl::cross_rank_links links;
  if (link) {
    for (std::size_t s = 0; s < S; ++s) links.placement.ranks.push_back(static_cast<int>(s));  // replica 0's ranks
    links.placement.num_ranks = static_cast<int>(S);
    links.link = pl::link_model::measured(link->latency_us, link->gbps);
  }
  try {
    su.placement = pl::place_layers(costs, slots, run.partition,
                                    {su.schedule, static_cast<int>(cfg.micro_batches), static_cast<int>(cfg.chunks)}, links);
  } catch (const std::exception& e) {
    throw input_error(std::string("--partition: ") + e.what());
  }
  su.layer_counts.clear();
  for (auto& st : su.placement.stages) su.layer_counts.push_back(static_cast<std::size_t>(st.lstm.last - st.lstm.first + 1));
  su.link = link;
  if (o.ranks) check_same_placement(*o.ranks, su.placement);
}

}  // namespace strata::lm::detail
