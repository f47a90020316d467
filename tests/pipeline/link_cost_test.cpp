// Contract tests of link costs between ranks: the simulator's per-boundary latency and queued
// transfers against hand-computed references, a free link or one rank simulating exactly like
// no link, the partitioner moving cuts off large activations on a slow link, and bad input.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/pipeline/partitioner.hpp"
#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/simulator.hpp"
#include "support/placements.hpp"
#include "support/refusals.hpp"

namespace sp = strata::pipeline;
using sp::layer_range;
using sp::schedule_kind;

namespace link_cost_test {

using strata::test::cpus;
using strata::test::invalid_argument_of;
using strata::test::ranges_of;

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();

/// One direction of a link: messages leave in send order, each occupying it for `transfer`,
/// and arrive `latency` after they are through. Returns the arrival of a message sent at `sent`.
struct reference_link {
  double latency = 0;
  double transfer = 0;
  double free_at = 0;
  double send(double sent) {
    free_at = std::max(sent, free_at) + transfer;
    return free_at + latency;
  }
};

/// GPipe's step by hand: every stage runs its M forwards in order, then its M backwards in
/// reverse order; boundary b's two directions are links of `latency[b]` and `transfer[b]`.
double reference_gpipe(const std::vector<double>& f, const std::vector<double>& b, int m,
                       const std::vector<double>& latency, const std::vector<double>& transfer) {
  const auto S = f.size();
  const auto M = static_cast<std::size_t>(m);
  std::vector<std::vector<double>> fwd_end(S, std::vector<double>(M)), bwd_end(S, std::vector<double>(M));
  for (std::size_t s = 0; s < S; ++s) {
    reference_link in = s > 0 ? reference_link{latency[s - 1], transfer[s - 1]} : reference_link{};
    double clock = 0;
    for (std::size_t k = 0; k < M; ++k) {
      if (s > 0) clock = std::max(clock, in.send(fwd_end[s - 1][k]));
      clock += f[s];
      fwd_end[s][k] = clock;
    }
  }
  double makespan = 0;
  for (std::size_t s = S; s-- > 0;) {
    reference_link in = s + 1 < S ? reference_link{latency[s], transfer[s]} : reference_link{};
    double clock = fwd_end[s][M - 1];
    for (std::size_t k = M; k-- > 0;) {
      if (s + 1 < S) clock = std::max(clock, in.send(bwd_end[s + 1][k]));
      clock += b[s];
      bwd_end[s][k] = clock;
    }
    makespan = std::max(makespan, clock);
  }
  return makespan;
}

/// Random ranks for S stages in a job of `ranks`, with consecutive stages often sharing one.
std::vector<int> random_ranks(std::mt19937& rng, int stages, int ranks) {
  std::vector<int> out;
  for (int s = 0; s < stages; ++s) out.push_back(s > 0 && rng() % 2 ? out.back() : static_cast<int>(rng() % static_cast<unsigned>(ranks)));
  return out;
}

BOOST_AUTO_TEST_SUITE(link_costs)

BOOST_AUTO_TEST_CASE(gpipe_with_links_between_ranks_matches_a_hand_computed_step) {
  std::mt19937 rng(1616);
  std::uniform_real_distribution<double> time(0.1, 3.0);
  std::uniform_real_distribution<double> mib(0.5, 200.0);
  int crossing = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int S = 2 + static_cast<int>(rng() % 4);
    const int M = 1 + static_cast<int>(rng() % 5);
    const sp::rank_placement where{random_ranks(rng, S, 3), 3};
    const auto link = sp::link_model::measured(time(rng) * 1e5, 0.05 + time(rng) / 10);  // 10-300 ms, 0.06-0.35 GB/s
    sp::cost_model base;
    std::vector<double> bytes, latency, transfer;
    for (int s = 0; s < S; ++s) base.forward.push_back(time(rng)), base.backward.push_back(time(rng));
    for (int s = 0; s + 1 < S; ++s) {
      bytes.push_back(std::floor(mib(rng) * (1 << 20)));
      const bool across = where.ranks[static_cast<std::size_t>(s)] != where.ranks[static_cast<std::size_t>(s + 1)];
      crossing += across;
      latency.push_back(across ? link.latency_s : 0);
      transfer.push_back(across ? bytes.back() / link.bytes_per_s : 0);
    }
    const auto costs = sp::with_links(base, where, bytes, link);
    BOOST_TEST_REQUIRE(costs.has_value(), costs.error().message());
    const auto sim = sp::simulate(sp::make_plan(schedule_kind::gpipe, S, M), *costs);
    BOOST_TEST_REQUIRE(sim.has_value(), sim.error().message());
    BOOST_TEST_CONTEXT("trial " << trial << " S=" << S << " M=" << M) {
      BOOST_TEST(sim->makespan == reference_gpipe(base.forward, base.backward, M, latency, transfer),
                 boost::test_tools::tolerance(1e-12));
    }
  }
  BOOST_TEST(crossing > 100);
}

BOOST_AUTO_TEST_CASE(wavefront_chunks_each_carry_a_share_of_the_bytes_and_the_whole_latency) {
  // Two stages on two ranks, one micro-batch in two chunks. By hand (f0 = 2, b0 = 4, f1 = 1,
  // b1 = 3; a chunk takes half; the link: latency 0.5, 6 per micro-batch, so 3 per chunk):
  //   stage 0 forwards chunk 0 in [0, 1], chunk 1 in [1, 2]; on the link chunk 0 in [1, 4]
  //   (arrives 4.5), chunk 1 queues behind it: [4, 7] (arrives 7.5).
  //   stage 1 forwards chunk 0 in [4.5, 5], chunk 1 in [7.5, 8]; backwards chunk 1 in [8, 9.5],
  //   chunk 0 in [9.5, 11]; gradients on the other direction: [9.5, 12.5] (arrives 13) and
  //   [12.5, 15.5] (arrives 16).
  //   stage 0 backwards chunk 1 in [13, 15], chunk 0 in [16, 18]: the step is 18.
  sp::cost_model base;
  base.forward = {2, 1};
  base.backward = {4, 3};
  const sp::link_model link{0.5, 1e6};
  const auto costs = sp::with_links(base, {{0, 1}, 2}, {6e6}, link).value();
  BOOST_TEST(costs.link_latency == std::vector<double>{0.5});
  BOOST_TEST(costs.link_transfer == std::vector<double>{6.0});
  const auto sim = sp::simulate(sp::make_plan(schedule_kind::wavefront, 2, 1, 2), costs).value();
  BOOST_TEST(sim.makespan == 18.0, boost::test_tools::tolerance(1e-12));
  // The link adds to what the cost model already charges every message: with send_latency
  // 0.25 each message arrives 0.25 later, but the link does not wait for it, so the gradient
  // of chunk 0 still queues behind chunk 1's (link [12.75, 15.75], arrives 16.5): 18.5.
  auto with_send_latency = costs;
  with_send_latency.send_latency = 0.25;
  BOOST_TEST(sp::simulate(sp::make_plan(schedule_kind::wavefront, 2, 1, 2), with_send_latency).value().makespan == 18.5,
             boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_free_link_or_stages_on_one_rank_simulate_exactly_like_no_link) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> time(0.1, 3.0);
  for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::wavefront}) {
    for (int trial = 0; trial < 30; ++trial) {
      const int S = 1 + static_cast<int>(rng() % 6);
      const int M = 1 + static_cast<int>(rng() % 8);
      const int C = kind == schedule_kind::wavefront ? 1 + static_cast<int>(rng() % 4) : 1;
      const auto p = sp::make_plan(kind, S, M, C);
      sp::cost_model base;
      for (int s = 0; s < S; ++s) base.forward.push_back(time(rng)), base.backward.push_back(time(rng));
      base.send_latency = time(rng) / 10;
      base.transfer = time(rng) / 10;
      base.push_gradients = time(rng);
      std::vector<double> bytes;
      for (int s = 0; s + 1 < S; ++s) bytes.push_back(std::floor(time(rng) * 1e8));
      const auto alone = sp::simulate(p, base).value();
      const sp::link_model slow{time(rng), 1e6};
      const auto free_link = sp::with_links(base, {random_ranks(rng, S, 4), 4}, bytes, {0, inf}).value();
      const auto one_rank = sp::with_links(base, {std::vector<int>(static_cast<std::size_t>(S), 2), 4}, bytes, slow).value();
      for (const auto* costs : {&free_link, &one_rank}) {
        const auto sim = sp::simulate(p, *costs).value();
        BOOST_TEST_CONTEXT(sp::to_string(kind) << " S=" << S << " M=" << M << " C=" << C) {
          BOOST_TEST(sim.makespan == alone.makespan);  // exactly
          BOOST_TEST(sim.bubble == alone.bubble);
          BOOST_TEST_REQUIRE(sim.timeline.size() == alone.timeline.size());
          for (std::size_t i = 0; i < sim.timeline.size(); ++i) {
            BOOST_TEST(sim.timeline[i].start == alone.timeline[i].start);
            BOOST_TEST(sim.timeline[i].end == alone.timeline[i].end);
          }
        }
      }
      // And a real link across ranks never makes the step shorter.
      if (S > 1) {
        std::vector<int> split(static_cast<std::size_t>(S), 0);
        split.back() = 1;
        const auto linked = sp::with_links(base, {split, 2}, bytes, slow).value();
        BOOST_TEST(sp::simulate(p, linked).value().makespan > alone.makespan);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_links_placements_and_sizes_are_refused_with_one_sentence) {
  const sp::link_model good{1e-5, 1e9};
  BOOST_TEST(!sp::check_link(good));
  BOOST_TEST(!sp::check_link({0, inf}));
  BOOST_TEST(sp::check_link({-1e-6, 1e9}).message() == "the link latency must be a finite number of seconds >= 0, got -1e-06");
  BOOST_TEST(sp::check_link({not_a_number, 1e9}).message() == "the link latency must be a finite number of seconds >= 0, got nan");
  BOOST_TEST(sp::check_link({inf, 1e9}).message() == "the link latency must be a finite number of seconds >= 0, got inf");
  BOOST_TEST(sp::check_link({0, -1}).message() == "the link bandwidth must be a positive number of bytes per second, got -1");
  BOOST_TEST(sp::check_link({0, 0}).message() == "the link bandwidth must be a positive number of bytes per second, got 0");
  BOOST_TEST(sp::check_link({0, not_a_number}).message() ==
             "the link bandwidth must be a positive number of bytes per second, got nan");
  BOOST_TEST(sp::check_link(sp::link_model::measured(-3, 1)).message() ==
             "the link latency must be a finite number of seconds >= 0, got -3e-06");

  BOOST_TEST(!sp::check_rank_placement({{0, 0, 1}, 2}, 3));
  BOOST_TEST(sp::check_rank_placement({{0, 5}, 2}, 2).message() ==
             "the rank placement puts stage 1 on rank 5, but the job has 2 ranks (0-1)");
  BOOST_TEST(sp::check_rank_placement({{0, -1}, 1}, 2).message() ==
             "the rank placement puts stage 1 on rank -1, but the job has 1 rank (0)");
  BOOST_TEST(sp::check_rank_placement({{0}, 2}, 2).message() ==
             "the rank placement needs one rank per stage: got 1 ranks for 2 stages");
  BOOST_TEST(sp::check_rank_placement({{0, 0}, 0}, 2).message() ==
             "the rank placement needs a job of at least 1 rank, got 0");

  const auto base = sp::cost_model::uniform(2, 1, 2);
  BOOST_TEST(sp::with_links(base, {{0, 1}, 2}, {1e6}, {0, -5}).error().message() ==
             "the link bandwidth must be a positive number of bytes per second, got -5");
  BOOST_TEST(sp::with_links(base, {{0, 2}, 2}, {1e6}, good).error().message() ==
             "the rank placement puts stage 1 on rank 2, but the job has 2 ranks (0-1)");
  BOOST_TEST(sp::with_links(base, {{0, 1}, 2}, {1e6, 1e6}, good).error().message() ==
             "the link costs need the bytes of 1 stage boundaries, got 2");
  BOOST_TEST(sp::with_links(base, {{0, 1}, 2}, {not_a_number}, good).error().message() ==
             "the activation bytes at stage boundary 0 must be a finite number >= 0, got nan");
  BOOST_TEST(sp::with_links(base, {{0, 1}, 2}, {-8}, good).error().message() ==
             "the activation bytes at stage boundary 0 must be a finite number >= 0, got -8");

  const auto p = sp::make_plan(schedule_kind::one_f_one_b, 3, 2);
  auto costs = sp::cost_model::uniform(3, 1, 2);
  costs.link_latency = {0.1};
  BOOST_TEST(sp::simulate(p, costs).error().message() ==
             "the cost model's link_latency has 1 entries but the plan has 2 stage boundaries (or leave it empty)");
  costs.link_latency = {0.1, 0.1};
  costs.link_transfer = {0.5, -0.5};
  BOOST_TEST(sp::simulate(p, costs).error().message() ==
             "the cost model's link_transfer for boundary 1 must be a finite non-negative number, got -0.5");
  costs.link_transfer = {0.5, not_a_number};
  BOOST_TEST(sp::simulate(p, costs).error().message() ==
             "the cost model's link_transfer for boundary 1 must be a finite non-negative number, got nan");
}

BOOST_AUTO_TEST_CASE(a_placement_across_ranks_pays_the_link_twice_per_micro_batch_in_gpipe_with_one_micro_batch) {
  // Embedding + lstm 0-1 on rank 0, lstm 2-3 + decoder on rank 1. One micro-batch under GPipe
  // runs every forward, then every backward: the step is stage 0's forward, the activation over
  // the link (latency + bytes / bandwidth), stage 1's forward and backward, the gradient back,
  // stage 0's backward.
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> time(0.001, 0.05);
  sp::model_costs m;
  auto layer = [&] { return sp::layer_cost{time(rng), time(rng), 0, 0, static_cast<std::uint64_t>(rng() % (64u << 20))}; };
  m.embedding = layer();
  m.decoder = layer();
  for (int l = 0; l < 4; ++l) m.lstm.push_back(layer());
  const auto link = sp::link_model::measured(25, 1.5);
  const sp::cross_rank_links across{{{0, 1}, 2}, link};
  const auto placed = sp::place_layers(m, cpus(2), sp::parse_partition("0-1,2-3", 4, 2), {schedule_kind::gpipe, 1, 1}, across);
  const double f0 = m.embedding.forward_s + m.lstm[0].forward_s + m.lstm[1].forward_s;
  const double b0 = m.embedding.backward_s + m.lstm[0].backward_s + m.lstm[1].backward_s;
  const double f1 = m.lstm[2].forward_s + m.lstm[3].forward_s + m.decoder.forward_s;
  const double b1 = m.lstm[2].backward_s + m.lstm[3].backward_s + m.decoder.backward_s;
  const double hop = 25e-6 + static_cast<double>(m.lstm[1].output_bytes) / 1.5e9;
  BOOST_TEST(placed.predicted_step_s == f0 + hop + f1 + b1 + hop + b0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(placed.across_ranks);
  BOOST_TEST(placed.stages[0].rank == 0);
  BOOST_TEST(placed.stages[1].rank == 1);
  BOOST_TEST(placed.stages[0].output_bytes == m.lstm[1].output_bytes);
  BOOST_TEST(placed.stages[0].link_s == hop, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(placed.stages[1].link_s == 0);
  BOOST_TEST((sp::boundary_bytes_of(m, ranges_of(placed)) == std::vector<double>{static_cast<double>(m.lstm[1].output_bytes)}));
  // On one rank the same split costs what it does without links.
  const auto local = sp::place_layers(m, cpus(2), sp::parse_partition("0-1,2-3", 4, 2), {schedule_kind::gpipe, 1, 1},
                                      {{{1, 1}, 2}, link});
  BOOST_TEST(local.predicted_step_s == f0 + f1 + b1 + b0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(!local.across_ranks);
}

BOOST_AUTO_TEST_CASE(a_slow_link_moves_the_cut_to_the_boundary_with_the_smallest_activation) {
  // Six equal LSTM layers (10 ms forward, 20 ms backward per micro-batch); the activation after
  // layer 2, where compute alone cuts, is 256 MiB; after layer 3 it is 1 MiB (say a bottleneck
  // layer). On one rank, or over a fast link, the cut stays at 0-2,3-5; over a 1 GB/s link the
  // 256 MiB take 268 ms per micro-batch, far more than a stage's 90 ms, so the cut moves to 0-3,4-5
  // (120 ms on the larger stage, 1 ms on the link).
  sp::model_costs m;
  m.lstm.assign(6, sp::layer_cost{0.010, 0.020, 0, 0, 64u << 20});
  m.lstm[2].output_bytes = 256u << 20;
  m.lstm[3].output_bytes = 1u << 20;
  for (auto shape : {sp::pipeline_shape{schedule_kind::one_f_one_b, 8, 1}, sp::pipeline_shape{schedule_kind::gpipe, 4, 1},
                     sp::pipeline_shape{schedule_kind::wavefront, 4, 5}}) {
    BOOST_TEST_CONTEXT(sp::to_string(shape.schedule)) {
      const auto none = sp::place_layers(m, cpus(2), {}, shape);
      const auto same_rank = sp::place_layers(m, cpus(2), {}, shape, {{{0, 0}, 1}, sp::link_model::measured(100, 1)});
      const auto fast = sp::place_layers(m, cpus(2), {}, shape, {{{0, 1}, 2}, sp::link_model::measured(1, 1000)});
      const auto slow = sp::place_layers(m, cpus(2), {}, shape, {{{0, 1}, 2}, sp::link_model::measured(100, 1)});
      BOOST_TEST((ranges_of(none) == std::vector<layer_range>{{0, 2}, {3, 5}}));
      BOOST_TEST((ranges_of(same_rank) == ranges_of(none)));
      BOOST_TEST(same_rank.predicted_step_s == none.predicted_step_s);
      BOOST_TEST((ranges_of(fast) == ranges_of(none)));
      BOOST_TEST((ranges_of(slow) == std::vector<layer_range>{{0, 3}, {4, 5}}));
      // The moved cut is better than keeping the balanced one over the slow link.
      const auto kept = sp::place_layers(m, cpus(2), {sp::partition_spec::kind_t::explicit_ranges, {{0, 2}, {3, 5}}},
                                         shape, {{{0, 1}, 2}, sp::link_model::measured(100, 1)});
      BOOST_TEST(slow.predicted_step_s < kept.predicted_step_s);
    }
  }
  // When every boundary carries the same bytes and the link keeps up with the stages (64 MiB:
  // 67 ms per micro-batch against 90 ms), no cut is cheaper: compute decides, link or not.
  for (auto& l : m.lstm) l.output_bytes = 64u << 20;
  const auto slow_even = sp::place_layers(m, cpus(2), {}, {schedule_kind::one_f_one_b, 8, 1},
                                          {{{0, 1}, 2}, sp::link_model::measured(100, 1)});
  BOOST_TEST((ranges_of(slow_even) == std::vector<layer_range>{{0, 2}, {3, 5}}));
}

BOOST_AUTO_TEST_CASE(auto_with_links_finds_the_brute_force_optimum_and_a_free_link_changes_nothing) {
  std::mt19937 rng(1607);
  std::uniform_real_distribution<double> time(0.5, 10.0);
  const schedule_kind kinds[] = {schedule_kind::one_f_one_b, schedule_kind::gpipe, schedule_kind::wavefront};
  int moved = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const int L = 2 + static_cast<int>(rng() % 8);
    const int D = 2 + static_cast<int>(rng() % static_cast<unsigned>(std::min(L - 1, 4)));
    const int M = 1 + static_cast<int>(rng() % 6);
    const schedule_kind kind = kinds[rng() % 3];
    const int C = kind == schedule_kind::wavefront ? 1 + static_cast<int>(rng() % 4) : 1;
    sp::model_costs m;
    auto layer = [&] { return sp::layer_cost{time(rng), time(rng), 0, 0, rng() % 20'000'000}; };
    m.embedding = layer();
    m.decoder = layer();
    for (int l = 0; l < L; ++l) m.lstm.push_back(layer());
    const sp::pipeline_shape shape{kind, M, C};
    const sp::cross_rank_links links{{random_ranks(rng, D, 3), 3}, sp::link_model::measured(1e5 * time(rng), 0.01)};
    BOOST_TEST_CONTEXT("trial " << trial << " L=" << L << " D=" << D << " M=" << M << " C=" << C) {
      const auto today = sp::place_layers(m, cpus(D), {}, shape);
      const auto free_link = sp::place_layers(m, cpus(D), {}, shape, {links.placement, {0, inf}});
      BOOST_TEST((ranges_of(free_link) == ranges_of(today)));
      BOOST_TEST(free_link.predicted_step_s == today.predicted_step_s);

      double best = inf;
      for (int mask = 0; mask < (1 << (L - 1)); ++mask) {  // every split: cuts after the layers in mask
        if (std::popcount(static_cast<unsigned>(mask)) != D - 1) continue;
        std::vector<layer_range> split;
        int first = 0;
        for (int l = 0; l < L; ++l)
          if (l == L - 1 || (mask >> l & 1)) split.push_back({first, l}), first = l + 1;
        best = std::min(best, sp::place_layers(m, cpus(D), {sp::partition_spec::kind_t::explicit_ranges, split}, shape, links)
                                  .predicted_step_s);
      }
      const auto placed = sp::place_layers(m, cpus(D), {}, shape, links);
      BOOST_TEST(placed.predicted_step_s == best, boost::test_tools::tolerance(1e-9));
      if (ranges_of(placed) != ranges_of(today)) ++moved;
    }
  }
  BOOST_TEST(moved > 10);  // the link changes the choice somewhere
}

BOOST_AUTO_TEST_CASE(bad_links_and_rank_placements_for_the_partitioner_are_one_sentence) {
  sp::model_costs m;
  m.lstm.assign(4, sp::layer_cost{1, 2, 0, 0, 1000});
  const sp::pipeline_shape shape{schedule_kind::one_f_one_b, 4, 1};
  auto place = [&](sp::cross_rank_links links) {
    return invalid_argument_of([&] { sp::place_layers(m, cpus(2), {}, shape, links); });
  };
  BOOST_TEST(place({{{0, 1}, 2}, {0, -1e9}}) == "the link bandwidth must be a positive number of bytes per second, got -1e+09");
  BOOST_TEST(place({{{0, 1}, 2}, {not_a_number, 1e9}}) == "the link latency must be a finite number of seconds >= 0, got nan");
  BOOST_TEST(place({{{0, 3}, 2}, {0, 1e9}}) == "the rank placement puts stage 1 on rank 3, but the job has 2 ranks (0-1)");
  BOOST_TEST(place({{{0, 1, 1}, 2}, {0, 1e9}}) == "the rank placement needs one rank per stage: got 3 ranks for 2 stages");
}

BOOST_AUTO_TEST_CASE(to_string_names_ranks_and_links_only_across_ranks) {
  sp::model_costs m;
  m.lstm.assign(4, sp::layer_cost{0.010, 0.020, 1 << 20, 0, 32u << 20});
  const auto spec = sp::parse_partition("even", 4, 2);
  const sp::pipeline_shape shape{schedule_kind::one_f_one_b, 4, 1};
  const auto across = sp::place_layers(m, cpus(2), spec, shape, {{{0, 1}, 2}, sp::link_model::measured(20, 2)}).to_string();
  const auto local = sp::place_layers(m, cpus(2), spec, shape, {{{0, 0}, 2}, sp::link_model::measured(20, 2)}).to_string();
  const auto plain = sp::place_layers(m, cpus(2), spec, shape).to_string();
  // 32 MiB at 2 GB/s is 16.8 ms, plus 20 us.
  BOOST_TEST(across.find("stage 0 (cpu:0, rank 0): embedding + lstm 0-1, 240 ms/step (60.0 ms per micro-batch), "
                         "2.0 MiB; to rank 1: 32.0 MiB per micro-batch, 16.8 ms\n"
                         "stage 1 (cpu:1, rank 1): lstm 2-3 + decoder") == 0,
             across);
  BOOST_TEST(local == plain);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace link_cost_test
