// Contract tests of make_plan: the orders of the three schedules, their parameters and errors.

#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>

#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/simulator.hpp"
#include "support/refusals.hpp"

namespace sp = strata::pipeline;
using sp::schedule_kind;

namespace plan_test {

using strata::test::invalid_argument_of;

BOOST_AUTO_TEST_SUITE(plans)

BOOST_AUTO_TEST_CASE(gpipe_runs_all_forwards_then_all_backwards_in_reverse) {
  auto p = sp::make_plan(schedule_kind::gpipe, 2, 3);
  BOOST_TEST(p.to_string() == "stage 0: F0 F1 F2 B2 B1 B0\nstage 1: F0 F1 F2 B2 B1 B0\n");
}

BOOST_AUTO_TEST_CASE(one_f_one_b_warms_up_with_s_minus_stage_minus_one_forwards) {
  auto p = sp::make_plan(schedule_kind::one_f_one_b, 4, 6);
  BOOST_TEST(p.to_string() ==
             "stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5\n"
             "stage 1: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5\n"
             "stage 2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5\n"
             "stage 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5\n");
}

BOOST_AUTO_TEST_CASE(one_f_one_b_with_fewer_micro_batches_than_stages_is_fill_drain) {
  auto p = sp::make_plan(schedule_kind::one_f_one_b, 4, 2);
  BOOST_TEST(p.to_string() ==
             "stage 0: F0 F1 B0 B1\nstage 1: F0 F1 B0 B1\nstage 2: F0 F1 B0 B1\nstage 3: F0 B0 F1 B1\n");
}

BOOST_AUTO_TEST_CASE(wavefront_runs_chunks_forward_in_order_and_backward_in_reverse) {
  auto p = sp::make_plan(schedule_kind::wavefront, 2, 2, 3);
  BOOST_TEST(p.to_string() ==
             "stage 0: F0.0 F0.1 F0.2 F1.0 B0.2 F1.1 B0.1 F1.2 B0.0 B1.2 B1.1 B1.0\n"
             "stage 1: F0.0 F0.1 F0.2 B0.2 F1.0 B0.1 F1.1 B0.0 F1.2 B1.2 B1.1 B1.0\n");
}

BOOST_AUTO_TEST_CASE(wavefront_with_one_chunk_is_one_f_one_b) {
  for (int s = 1; s <= 6; ++s) {
    for (int m = 1; m <= 9; ++m) {
      BOOST_TEST(sp::make_plan(schedule_kind::wavefront, s, m, 1).stages ==
                 sp::make_plan(schedule_kind::one_f_one_b, s, m, 1).stages);
    }
  }
}

BOOST_AUTO_TEST_CASE(plans_wrap_computes_in_receives_and_sends_and_end_with_push_then_pull) {
  using K = sp::action_kind;
  auto p = sp::make_plan(schedule_kind::gpipe, 3, 1);
  BOOST_TEST(p.stages[0] == (std::vector<sp::action>{{K::forward, 0, 0}, {K::send_activation, 0, 0},
                                                     {K::recv_gradient, 0, 0}, {K::backward, 0, 0},
                                                     {K::push_gradients, -1, -1}, {K::pull_weights, -1, -1}}));
  BOOST_TEST(p.stages[1] == (std::vector<sp::action>{{K::recv_activation, 0, 0}, {K::forward, 0, 0},
                                                     {K::send_activation, 0, 0}, {K::recv_gradient, 0, 0},
                                                     {K::backward, 0, 0}, {K::send_gradient, 0, 0},
                                                     {K::push_gradients, -1, -1}, {K::pull_weights, -1, -1}}));
  BOOST_TEST(p.stages[2] == (std::vector<sp::action>{{K::recv_activation, 0, 0}, {K::forward, 0, 0},
                                                     {K::backward, 0, 0}, {K::send_gradient, 0, 0},
                                                     {K::push_gradients, -1, -1}, {K::pull_weights, -1, -1}}));
}

BOOST_AUTO_TEST_CASE(a_single_stage_plan_has_no_messages) {
  auto p = sp::make_plan(schedule_kind::one_f_one_b, 1, 3);
  BOOST_TEST(p.to_string() == "stage 0: F0 B0 F1 B1 F2 B2\n");
  BOOST_TEST(p.stages[0].size() == 8u);
}

BOOST_AUTO_TEST_CASE(every_generated_plan_passes_the_static_checks) {
  for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::wavefront}) {
    for (int s = 1; s <= 8; ++s) {
      for (int m = 1; m <= 10; ++m) {
        for (int c = 1; c <= (kind == schedule_kind::wavefront ? 6 : 1); ++c) {
          auto err = sp::check_plan(sp::make_plan(kind, s, m, c));
          BOOST_TEST(!err, sp::to_string(kind) << " S=" << s << " M=" << m << " C=" << c << ": " << err.message());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_parameters_throw_invalid_argument_with_one_sentence) {
  BOOST_TEST(invalid_argument_of([] { sp::make_plan(schedule_kind::gpipe, 0, 4); }) ==
             "a pipeline needs at least 1 stage, got 0");
  BOOST_TEST(invalid_argument_of([] { sp::make_plan(schedule_kind::one_f_one_b, 4, -2); }) ==
             "a pipeline needs at least 1 micro-batch per step, got -2");
  BOOST_TEST(invalid_argument_of([] { sp::make_plan(schedule_kind::wavefront, 4, 4, 0); }) ==
             "a micro-batch needs at least 1 time chunk, got 0");
  BOOST_TEST(invalid_argument_of([] { sp::make_plan(schedule_kind::one_f_one_b, 4, 4, 3); }) ==
             "the 1f1b schedule sends whole micro-batches, so chunks must be 1 (got 3); use the wavefront schedule "
             "for time chunks");
  BOOST_TEST(invalid_argument_of([] { sp::make_plan(schedule_kind::gpipe, 4, 4, 2); }).find("gpipe") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(schedule_names_round_trip_and_unknown_names_are_rejected) {
  for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::wavefront})
    BOOST_TEST((sp::parse_schedule(sp::to_string(kind)) == kind));
  BOOST_TEST(invalid_argument_of([] { sp::parse_schedule("1F1B"); }) ==
             "schedule '1F1B' is unknown; expected gpipe, 1f1b or wavefront");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace plan_test
