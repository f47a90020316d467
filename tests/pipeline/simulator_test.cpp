// Contract tests of the plan simulator: completeness and dependencies of every schedule checked
// on the simulated timeline, the analytic bubble, memory in flight, deadlock reports, pictures.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/simulator.hpp"
#include "support/refusals.hpp"

namespace sp = strata::pipeline;
using sp::action_kind;
using sp::schedule_kind;

namespace simulator_test {

using strata::test::contains;

/// Checks a timeline independently of the simulator's own checks: each (stage, mb, chunk) has
/// one forward and one backward, and every data dependency holds in time (with `latency`
/// between stages).
void check_timeline(const sp::plan& p, const sp::simulation& sim, double latency) {
  using key = std::tuple<int, int, int>;
  std::map<key, const sp::timeline_entry*> fwd;
  std::map<key, const sp::timeline_entry*> bwd;
  for (const auto& e : sim.timeline) {
    if (!sp::is_compute(e.kind)) continue;
    auto& into = e.kind == action_kind::forward ? fwd : bwd;
    BOOST_TEST_REQUIRE(into.emplace(key{e.stage, e.micro_batch, e.chunk}, &e).second);
  }
  const std::size_t units = static_cast<std::size_t>(p.num_stages * p.micro_batches * p.chunks);
  BOOST_TEST_REQUIRE(fwd.size() == units);
  BOOST_TEST_REQUIRE(bwd.size() == units);
  constexpr double eps = 1e-9;
  const int last = p.num_stages - 1;
  for (const auto& [k, f] : fwd) {
    const auto [s, mb, c] = k;
    const auto* b = bwd.at(k);
    BOOST_TEST(b->start >= f->end - eps);
    if (s > 0) BOOST_TEST(f->start >= fwd.at({s - 1, mb, c})->end + latency - eps);
    if (c > 0) BOOST_TEST(f->start >= fwd.at({s, mb, c - 1})->end - eps);
    if (s < last) BOOST_TEST(b->start >= bwd.at({s + 1, mb, c})->end + latency - eps);
    if (c + 1 < p.chunks) BOOST_TEST(b->start >= bwd.at({s, mb, c + 1})->end - eps);
    if (s == last) BOOST_TEST(b->start >= fwd.at({s, mb, p.chunks - 1})->end - eps);  // BPTT starts at step T-1
  }
  // No stage does two things at once.
  for (std::size_t i = 1; i < sim.timeline.size(); ++i) {
    const auto& a = sim.timeline[i - 1];
    const auto& b = sim.timeline[i];
    if (a.stage == b.stage) BOOST_TEST(b.start >= a.end - eps);
  }
}

double analytic_bubble(int s, int m) { return static_cast<double>(s - 1) / (m + s - 1); }

/// 1f1b's stage-1 order with its first backward swapped with its second forward: stage 1 then
/// waits for a gradient that stage 2 can only send after receiving stage 1's next activation.
sp::plan broken_one_f_one_b() {
  std::vector<std::vector<sp::action>> order;
  for (const auto& stage : sp::make_plan(schedule_kind::one_f_one_b, 4, 4).stages) {
    std::vector<sp::action> computes;
    for (const auto& a : stage)
      if (sp::is_compute(a.kind)) computes.push_back(a);
    order.push_back(computes);
  }
  // stage 1: F0 F1 F2 B0 ... -> F0 B0 F2 F1 ...
  BOOST_TEST_REQUIRE((order[1][1] == sp::action{action_kind::forward, 1, 0}));
  BOOST_TEST_REQUIRE((order[1][3] == sp::action{action_kind::backward, 0, 0}));
  std::swap(order[1][1], order[1][3]);
  return sp::plan_from_compute_order(schedule_kind::one_f_one_b, 4, 1, order);
}

BOOST_AUTO_TEST_SUITE(simulator)

BOOST_AUTO_TEST_CASE(every_schedule_is_deadlock_free_complete_and_respects_dependencies) {
  for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::wavefront}) {
    for (int s = 1; s <= 8; ++s) {
      for (int m = 1; m <= 12; ++m) {
        for (int c = 1; c <= (kind == schedule_kind::wavefront ? 7 : 1); ++c) {
          BOOST_TEST_CONTEXT(sp::to_string(kind) << " S=" << s << " M=" << m << " C=" << c) {
            const auto p = sp::make_plan(kind, s, m, c);
            BOOST_TEST(!sp::find_deadlock(p).has_value());
            // Unequal stages and a send latency shake out orders that only work in lockstep.
            auto costs = sp::cost_model::uniform(s, 1.0, 2.0, 0.05);
            for (int i = 0; i < s; ++i) costs.forward[static_cast<std::size_t>(i)] += 0.3 * (i % 3);
            const auto sim = sp::simulate(p, costs);
            BOOST_TEST_REQUIRE(sim.has_value(), sim.error().message());
            check_timeline(p, *sim, 0.05);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(gpipe_and_1f1b_bubbles_match_the_analytic_formula_with_equal_stages) {
  for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b}) {
    for (int s = 1; s <= 8; ++s) {
      for (int m = 1; m <= 16; ++m) {
        for (auto [f, b] : {std::pair{1.0, 1.0}, std::pair{1.0, 2.0}}) {
          const auto sim = sp::simulate(sp::make_plan(kind, s, m), sp::cost_model::uniform(s, f, b)).value();
          BOOST_TEST(sim.bubble == analytic_bubble(s, m), boost::test_tools::tolerance(1e-12));
          BOOST_TEST(sim.makespan == (m + s - 1) * (f + b), boost::test_tools::tolerance(1e-12));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(send_latency_adds_two_hops_per_stage_boundary_to_gpipe) {
  const int s = 4;
  const int m = 6;
  const double f = 1;
  const double b = 2;
  const double l = 0.25;
  const auto sim = sp::simulate(sp::make_plan(schedule_kind::gpipe, s, m), sp::cost_model::uniform(s, f, b, l)).value();
  BOOST_TEST(sim.makespan == (m + s - 1) * (f + b) + 2 * (s - 1) * l, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(wavefront_with_several_chunks_has_a_smaller_bubble_than_1f1b) {
  for (int s = 2; s <= 8; ++s) {
    for (int m : {1, 4, 8, 16}) {
      const auto costs = sp::cost_model::uniform(s, 1.0, 2.0);
      const double one_f_one_b = sp::simulate(sp::make_plan(schedule_kind::one_f_one_b, s, m), costs)->bubble;
      double previous = one_f_one_b;
      for (int c : {2, 5, 7}) {
        const double wave = sp::simulate(sp::make_plan(schedule_kind::wavefront, s, m, c), costs)->bubble;
        BOOST_TEST(wave < previous, "S=" << s << " M=" << m << " C=" << c << ": " << wave << " vs " << previous);
        previous = wave;
      }
      BOOST_TEST_MESSAGE("S=" << s << " M=" << m << ": 1f1b bubble " << one_f_one_b << ", wavefront C=7 " << previous);
    }
  }
}

BOOST_AUTO_TEST_CASE(wavefront_bubble_is_the_1f1b_formula_with_c_times_the_micro_batches) {
  // Fill and drain shrink to (S - 1) chunks: makespan = M (f + b) + (S - 1) (f + b) / C.
  for (int s = 1; s <= 8; ++s) {
    for (int m = 1; m <= 10; ++m) {
      for (int c = 1; c <= 7; ++c) {
        const auto sim =
            sp::simulate(sp::make_plan(schedule_kind::wavefront, s, m, c), sp::cost_model::uniform(s, 1.0, 2.0)).value();
        BOOST_TEST(sim.bubble == static_cast<double>(s - 1) / (c * m + s - 1), boost::test_tools::tolerance(1e-9));
        BOOST_TEST(sim.makespan == m * 3.0 + (s - 1) * 3.0 / c, boost::test_tools::tolerance(1e-9));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(peak_activations_in_flight_follow_each_schedule) {
  const int s = 4;
  const int m = 8;
  const auto costs = sp::cost_model::uniform(s, 1.0, 2.0);
  const auto gpipe = sp::simulate(sp::make_plan(schedule_kind::gpipe, s, m), costs).value();
  const auto ofob = sp::simulate(sp::make_plan(schedule_kind::one_f_one_b, s, m), costs).value();
  const auto wave = sp::simulate(sp::make_plan(schedule_kind::wavefront, s, m, 5), costs).value();
  for (int i = 0; i < s; ++i) {
    const auto k = static_cast<std::size_t>(i);
    BOOST_TEST(gpipe.peak_in_flight_micro_batches[k] == m);
    BOOST_TEST(ofob.peak_in_flight_micro_batches[k] == s - i);
    BOOST_TEST(wave.peak_in_flight_units[k] == s - i + 5 - 1);
    BOOST_TEST(wave.peak_in_flight_micro_batches[k] == (s - i + 5 - 1) / 5.0);
  }
  // Fewer micro-batches than stages: 1F1B holds all of them at the front.
  const auto few = sp::simulate(sp::make_plan(schedule_kind::one_f_one_b, 6, 2), sp::cost_model::uniform(6, 1, 1)).value();
  BOOST_TEST(few.peak_in_flight_units[0] == 2);
  BOOST_TEST(few.peak_in_flight_units[5] == 1);
}

BOOST_AUTO_TEST_CASE(a_swapped_plan_is_reported_as_a_deadlock_naming_the_stages_in_the_cycle) {
  const auto p = broken_one_f_one_b();
  BOOST_TEST(!sp::check_plan(p));  // every stage is fine on its own: only running it shows the cycle
  const auto d = sp::find_deadlock(p);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->cycle == (std::vector<int>{1, 2}));
  BOOST_TEST(d->stuck.size() == 4u);
  const auto& one = d->stuck[1];
  BOOST_TEST(one.stage == 1);
  BOOST_TEST((one.waiting_for == sp::action{action_kind::recv_gradient, 0, 0}));
  BOOST_TEST(one.sender == 2);
  BOOST_TEST(!one.never_sent);
  const auto& two = d->stuck[2];
  BOOST_TEST((two.waiting_for == sp::action{action_kind::recv_activation, 1, 0}));
  BOOST_TEST(two.sender == 1);

  const auto sim = sp::simulate(p, sp::cost_model::uniform(4, 1, 2));
  BOOST_TEST_REQUIRE(!sim.has_value());
  BOOST_TEST((sim.error().code() == strata::errc::invalid_argument));
  BOOST_TEST(sim.error().message() ==
             "plan deadlocks: stage 1 waits at action 3 (recv_gradient mb 0 chunk 0) for stage 2, which waits at "
             "action 3 (recv_activation mb 1 chunk 0) for stage 1 (stuck: stages 0 1 2 3)");
}

BOOST_AUTO_TEST_CASE(a_receive_with_no_matching_send_is_a_deadlock) {
  auto p = sp::make_plan(schedule_kind::gpipe, 3, 2);
  auto& zero = p.stages[0];
  zero.erase(std::find(zero.begin(), zero.end(), sp::action{action_kind::send_activation, 1, 0}));
  const auto sim = sp::simulate(p, sp::cost_model::uniform(3, 1, 1));
  BOOST_TEST_REQUIRE(!sim.has_value());
  BOOST_TEST(contains(sim.error().message(),
                      "plan deadlocks: stage 1 waits at action 3 (recv_activation mb 1 chunk 0), which stage 0 never sends"));
  const auto d = sp::find_deadlock(p);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->cycle.empty());
}

BOOST_AUTO_TEST_CASE(a_receive_from_beyond_the_pipeline_is_a_deadlock) {
  auto p = sp::make_plan(schedule_kind::gpipe, 2, 1);
  p.stages[0].insert(p.stages[0].begin(), sp::action{action_kind::recv_activation, 0, 0});
  const auto d = sp::find_deadlock(p);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(contains(d->to_string(), "stage 0 waits at action 0 (recv_activation mb 0 chunk 0), which no stage sends"));
}

BOOST_AUTO_TEST_CASE(incomplete_or_misordered_plans_fail_the_checks_with_the_unit_named) {
  using K = action_kind;
  auto without = [](sp::plan p, int stage, sp::action a) {
    auto& v = p.stages[static_cast<std::size_t>(stage)];
    v.erase(std::find(v.begin(), v.end(), a));
    return p;
  };
  const auto gp = sp::make_plan(schedule_kind::gpipe, 2, 2);
  BOOST_TEST(sp::check_plan(without(gp, 1, {K::backward, 1, 0})).message() == "stage 1 micro-batch 1 chunk 0 has no backward");
  BOOST_TEST(sp::check_plan(without(gp, 0, {K::push_gradients, -1, -1})).message() ==
             "stage 0 must push its gradients once, after its last backward");
  BOOST_TEST(sp::check_plan(without(gp, 1, {K::recv_activation, 0, 0})).message() ==
             "stage 1 micro-batch 0 chunk 0 runs its forward without first receiving the activation from stage 0");

  auto doubled = gp;
  doubled.stages[0].insert(doubled.stages[0].begin(), sp::action{K::forward, 0, 0});
  BOOST_TEST(sp::check_plan(doubled).message() == "stage 0 action 1 (forward mb 0 chunk 0) repeats action 0");

  auto backwards_first = sp::plan_from_compute_order(schedule_kind::gpipe, 1, 1, {{{K::backward, 0, 0}, {K::forward, 0, 0}}});
  BOOST_TEST(sp::check_plan(backwards_first).message() == "stage 0 micro-batch 0 chunk 0 runs its backward before its forward");

  auto chunks_out_of_order = sp::plan_from_compute_order(
      schedule_kind::wavefront, 1, 2, {{{K::forward, 0, 1}, {K::forward, 0, 0}, {K::backward, 0, 1}, {K::backward, 0, 0}}});
  BOOST_TEST(sp::check_plan(chunks_out_of_order).message() ==
             "stage 0 micro-batch 0 chunk 1 runs its forward before chunk 0's, whose final state it needs");
  auto backward_chunks_in_order = sp::plan_from_compute_order(
      schedule_kind::wavefront, 1, 2, {{{K::forward, 0, 0}, {K::forward, 0, 1}, {K::backward, 0, 0}, {K::backward, 0, 1}}});
  BOOST_TEST(sp::check_plan(backward_chunks_in_order).message() ==
             "stage 0 micro-batch 0 chunk 0 runs its backward before chunk 1's, whose state gradient it needs");

  auto outside = sp::plan_from_compute_order(schedule_kind::gpipe, 1, 1, {{{K::forward, 0, 0}, {K::backward, 0, 0}, {K::forward, 3, 0}}});
  BOOST_TEST(contains(sp::check_plan(outside).message(), "names a unit outside 1 micro-batches x 1 chunks"));
}

BOOST_AUTO_TEST_CASE(a_cost_model_for_another_stage_count_is_rejected) {
  const auto sim = sp::simulate(sp::make_plan(schedule_kind::gpipe, 3, 2), sp::cost_model::uniform(2, 1, 1));
  BOOST_TEST_REQUIRE(!sim.has_value());
  BOOST_TEST(sim.error().message() ==
             "the cost model has forward/backward times for 2/2 stages but the plan has 3");
}

BOOST_AUTO_TEST_CASE(render_ascii_draws_one_row_per_stage) {
  const auto sim = sp::simulate(sp::make_plan(schedule_kind::gpipe, 2, 2), sp::cost_model::uniform(2, 1, 1)).value();
  BOOST_TEST(sp::render_ascii(sim.timeline) ==
             "one column = 1 time units; 0-9 forward of micro-batch n, a-z backward (a = 0), P/W push/pull, . idle\n"
             "stage 0 |01..ba|\n"
             "stage 1 |.01ba.|\n");
  const auto unequal = sp::simulate(sp::make_plan(schedule_kind::one_f_one_b, 2, 2), sp::cost_model::uniform(2, 1, 2)).value();
  BOOST_TEST(contains(sp::render_ascii(unequal.timeline), "stage 0 |01..aa.bb|\nstage 1 |.0aa1bb..|\n"));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace simulator_test
