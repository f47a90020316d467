// Contract tests of the partitioner: the dynamic programme against brute force, memory limits,
// --partition parsing (auto, even, explicit lists and every bad case), the printed plan.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/pipeline/partitioner.hpp"
#include "support/placements.hpp"
#include "support/refusals.hpp"

namespace sp = strata::pipeline;
using sp::layer_range;
using sp::schedule_kind;

namespace partitioner_test {

using strata::test::contains;
using strata::test::cpus;
using strata::test::invalid_argument_of;
using strata::test::ranges_of;

sp::model_costs uniform_model(int layers, double fwd, double bwd, std::uint64_t bytes = 0) {
  sp::model_costs m;
  m.lstm.assign(static_cast<std::size_t>(layers), sp::layer_cost{fwd, bwd, bytes, 0});
  return m;
}

/// Every contiguous split of L layers on D devices (each device >= 1 layer).
void for_each_split(int layers, int devices, const std::function<void(const std::vector<layer_range>&)>& visit) {
  std::vector<layer_range> cur;
  std::function<void(int)> rec = [&](int first) {
    const int d = static_cast<int>(cur.size());
    if (d == devices - 1) {
      cur.push_back({first, layers - 1});
      visit(cur);
      cur.pop_back();
      return;
    }
    for (int last = first; last <= layers - (devices - d); ++last) {
      cur.push_back({first, last});
      rec(last + 1);
      cur.pop_back();
    }
  };
  rec(0);
}

/// Independent reference for a 1F1B stage's memory: resident bytes + activations of
/// min(D - d, M) micro-batches in flight.
long double reference_memory(const sp::model_costs& m, const std::vector<layer_range>& split, int d, int micro_batches) {
  const int D = static_cast<int>(split.size());
  long double resident = 0;
  long double act = 0;
  for (int l = split[static_cast<std::size_t>(d)].first; l <= split[static_cast<std::size_t>(d)].last; ++l) {
    resident += m.lstm[static_cast<std::size_t>(l)].memory_bytes;
    act += m.lstm[static_cast<std::size_t>(l)].activation_bytes;
  }
  if (d == 0) resident += m.embedding.memory_bytes, act += m.embedding.activation_bytes;
  if (d == D - 1) resident += m.decoder.memory_bytes, act += m.decoder.activation_bytes;
  return resident + act * std::min(D - d, micro_batches);
}

BOOST_AUTO_TEST_SUITE(partitioner)

BOOST_AUTO_TEST_CASE(auto_finds_the_brute_force_optimum_on_random_instances) {
  // The optimum: the feasible split whose plan simulates the shortest step, ties to the smaller
  // bottleneck (each split simulated through place_layers with explicit ranges).
  std::mt19937 rng(20240611);
  std::uniform_real_distribution<double> time(0.5, 10.0);
  std::uniform_int_distribution<std::uint64_t> bytes(1, 100);
  const schedule_kind kinds[] = {schedule_kind::one_f_one_b, schedule_kind::gpipe, schedule_kind::wavefront};
  int feasible = 0;
  int infeasible = 0;
  int not_min_bottleneck = 0;  // instances where the shortest step is not the smallest bottleneck
  for (int trial = 0; trial < 400; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 9);
    const int D = 1 + static_cast<int>(rng() % static_cast<unsigned>(std::min(L, 5)));
    const int M = 1 + static_cast<int>(rng() % 6);
    const schedule_kind kind = kinds[rng() % 3];
    const int C = kind == schedule_kind::wavefront ? 1 + static_cast<int>(rng() % 4) : 1;
    sp::model_costs m;
    auto layer = [&] { return sp::layer_cost{time(rng), time(rng), bytes(rng), bytes(rng) / 4}; };
    m.embedding = layer();
    m.embedding.forward_s /= 5;  // memory-heavy, little compute
    m.decoder = layer();
    if (rng() % 2) m.decoder.forward_s += m.decoder.backward_s, m.decoder.backward_s = 0;  // fused loss
    for (int l = 0; l < L; ++l) m.lstm.push_back(layer());
    // Limits from tight (often infeasible) to loose; one device may differ from the rest.
    std::vector<sp::device_slot> devs = cpus(D, 60 + rng() % 500);
    devs[rng() % devs.size()].memory_limit += rng() % 200;
    const sp::pipeline_shape shape{kind, M, C};

    double best_step = std::numeric_limits<double>::infinity(), best_bottleneck = 0;
    double min_bottleneck = std::numeric_limits<double>::infinity();
    for_each_split(L, D, [&](const std::vector<layer_range>& split) {
      sp::placement p;
      try {
        p = sp::place_layers(m, devs, {sp::partition_spec::kind_t::explicit_ranges, split}, shape);
      } catch (const std::invalid_argument&) {
        return;  // over some device's memory
      }
      const double b = sp::bottleneck_of(m, split);
      min_bottleneck = std::min(min_bottleneck, b);
      const double tol = std::isinf(best_step) ? 0 : 1e-9 * best_step;
      if (p.predicted_step_s < best_step - tol || (p.predicted_step_s <= best_step + tol && b < best_bottleneck))
        best_step = p.predicted_step_s, best_bottleneck = b;
    });
    BOOST_TEST_CONTEXT("trial " << trial << " L=" << L << " D=" << D << " M=" << M << " C=" << C) {
      if (std::isinf(best_step)) {
        ++infeasible;
        const auto why = invalid_argument_of([&] { sp::place_layers(m, devs, {}, shape); });
        BOOST_TEST(contains(why, "no contiguous split of"), why);
        continue;
      }
      ++feasible;
      const auto placed = sp::place_layers(m, devs, {}, shape);
      const auto split = ranges_of(placed);
      BOOST_TEST(placed.predicted_step_s == best_step, boost::test_tools::tolerance(1e-9));
      BOOST_TEST(sp::bottleneck_of(m, split) == best_bottleneck, boost::test_tools::tolerance(1e-9));
      if (best_bottleneck > min_bottleneck * (1 + 1e-9)) ++not_min_bottleneck;
      for (int d = 0; d < D && kind == schedule_kind::one_f_one_b && C == 1; ++d) {  // the reference's schedule
        BOOST_TEST(reference_memory(m, split, d, M) <= devs[static_cast<std::size_t>(d)].memory_limit);
        BOOST_TEST(static_cast<long double>(placed.stages[static_cast<std::size_t>(d)].memory_bytes) ==
                   reference_memory(m, split, d, M));
      }
      for (int d = 0; d < D; ++d)
        BOOST_TEST(placed.stages[static_cast<std::size_t>(d)].memory_bytes <= devs[static_cast<std::size_t>(d)].memory_limit);
    }
  }
  BOOST_TEST(feasible > 100);
  BOOST_TEST(infeasible > 10);
  BOOST_TEST(not_min_bottleneck > 0);  // the objective differs from the bottleneck's somewhere
}

BOOST_AUTO_TEST_CASE(wavefront_with_one_micro_batch_and_a_fused_decoder_keeps_the_lstm_layers_even) {
  // The word-level seed model on cpu:2 as measured (ms per micro-batch): LSTM layers 20 forward
  // and 35 backward, the decoder 192 with its backward inside the forward. The smallest
  // bottleneck puts six layers before it (6 x 55 vs 2 x 55 + 192), but wavefront with one
  // micro-batch overlaps the stages' forwards, then their backwards: the step is about the
  // larger forward plus the larger backward, shortest with four and four (measured on cpu:2:
  // 547-563 ms against 588-597 ms for six and two).
  sp::model_costs m = uniform_model(8, 0.020, 0.035);
  m.decoder.forward_s = 0.192;
  const sp::pipeline_shape shape{schedule_kind::wavefront, 1, 7};
  const auto placed = sp::place_layers(m, cpus(2), {}, shape);
  const auto minimax = sp::place_layers(m, cpus(2), {sp::partition_spec::kind_t::explicit_ranges, {{0, 5}, {6, 7}}}, shape);
  BOOST_TEST(placed.stages[0].lstm.last == 3);
  BOOST_TEST(sp::bottleneck_of(m, {{0, 5}, {6, 7}}) < sp::bottleneck_of(m, ranges_of(placed)));
  BOOST_TEST(placed.predicted_step_s < minimax.predicted_step_s);
  // GPipe with one micro-batch runs the stages one after the other: every split takes as long,
  // and the smallest bottleneck breaks the tie. Many micro-batches: the steady state is the
  // bottleneck again.
  for (const sp::pipeline_shape s : {sp::pipeline_shape{schedule_kind::gpipe, 1, 1},
                                     sp::pipeline_shape{schedule_kind::one_f_one_b, 32, 1}})
    BOOST_TEST(sp::place_layers(m, cpus(2), {}, s).stages[0].lstm.last == 5);
}

BOOST_AUTO_TEST_CASE(on_large_models_auto_ends_where_no_one_layer_move_shortens_the_step) {
  // 40 layers on 6 devices: 575757 splits, too many to simulate, so boundary moves refine the
  // dynamic programme's split.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(0.5, 10.0);
  for (int trial = 0; trial < 5; ++trial) {
    sp::model_costs m;
    for (int l = 0; l < 40; ++l) m.lstm.push_back({time(rng), time(rng), 0, 0});
    m.decoder = {60 * time(rng), 0, 0, 0};
    const sp::pipeline_shape shape{schedule_kind::wavefront, 1, 5};
    auto step_of = [&](const std::vector<layer_range>& r) {
      return sp::place_layers(m, cpus(6), {sp::partition_spec::kind_t::explicit_ranges, r}, shape).predicted_step_s;
    };
    const auto placed = sp::place_layers(m, cpus(6), {}, shape);
    const auto split = ranges_of(placed);
    BOOST_TEST(placed.predicted_step_s == step_of(split), boost::test_tools::tolerance(1e-12));
    for (std::size_t d = 0; d + 1 < split.size(); ++d)
      for (int move : {-1, 1}) {
        auto cand = split;
        cand[d].last += move;
        cand[d + 1].first += move;
        if (cand[d].last < cand[d].first || cand[d + 1].first > cand[d + 1].last) continue;
        BOOST_TEST(step_of(cand) >= placed.predicted_step_s * (1 - 1e-9));
      }
  }
}

BOOST_AUTO_TEST_CASE(a_memory_heavy_embedding_pushes_lstm_layers_off_the_first_device) {
  auto m = uniform_model(8, 1, 2, 10);
  m.embedding = {0.1, 0.1, 50, 0};
  m.decoder = {3, 3, 10, 0};
  // Each LSTM layer costs 3, the decoder 6: unconstrained, 5 + 3 layers balances best
  // (15.2 vs 15), but 5 layers and the embedding need 100 bytes on device 0: so 4 + 4.
  const auto placed = sp::place_layers(m, cpus(2, 90), {}, {schedule_kind::one_f_one_b, 4, 1});
  BOOST_TEST((ranges_of(placed) == std::vector<layer_range>{{0, 3}, {4, 7}}));
  const auto loose = sp::place_layers(m, cpus(2), {}, {schedule_kind::one_f_one_b, 4, 1});
  BOOST_TEST((ranges_of(loose) == std::vector<layer_range>{{0, 4}, {5, 7}}));
  const auto tight = invalid_argument_of([&] { sp::place_layers(m, cpus(2, 55), {}, {schedule_kind::one_f_one_b, 4, 1}); });
  BOOST_TEST(tight == "no contiguous split of 8 LSTM layers (with embedding and decoder) fits in the memory of 2 devices "
                      "(cpu:0 55 B, cpu:1 55 B)");
}

BOOST_AUTO_TEST_CASE(activation_memory_follows_the_schedule_in_flight) {
  auto m = uniform_model(4, 1, 1, 0);
  for (auto& l : m.lstm) l.activation_bytes = 1000;
  const auto spec = sp::parse_partition("even", 4, 2);
  const auto gpipe = sp::place_layers(m, cpus(2), spec, {schedule_kind::gpipe, 8, 1});
  const auto ofob = sp::place_layers(m, cpus(2), spec, {schedule_kind::one_f_one_b, 8, 1});
  const auto wave = sp::place_layers(m, cpus(2), spec, {schedule_kind::wavefront, 8, 4});
  BOOST_TEST(gpipe.stages[0].memory_bytes == 2u * 1000 * 8);
  BOOST_TEST(ofob.stages[0].memory_bytes == 2u * 1000 * 2);
  BOOST_TEST(ofob.stages[1].memory_bytes == 2u * 1000 * 1);
  BOOST_TEST(wave.stages[0].memory_bytes == 2u * 1000 * 5 / 4);  // (S - s + C - 1) / C micro-batches
  BOOST_TEST(wave.stages[1].memory_bytes == 2u * 1000 * 4 / 4);
}

BOOST_AUTO_TEST_CASE(the_predicted_bubble_comes_from_the_simulator) {
  const auto m = uniform_model(8, 0.001, 0.002);
  const auto placed = sp::place_layers(m, cpus(4), sp::parse_partition("auto", 8, 4), {schedule_kind::one_f_one_b, 8, 1});
  BOOST_TEST((ranges_of(placed) == std::vector<layer_range>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  BOOST_TEST(placed.predicted_bubble == 3.0 / 11.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(placed.predicted_step_s == 11 * 0.006, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(explicit_and_even_placements_that_exceed_memory_name_the_device) {
  const auto m = uniform_model(4, 1, 1, 100);
  const auto msg = invalid_argument_of(
      [&] { sp::place_layers(m, cpus(2, 250), sp::parse_partition("0-2,3", 4, 2), {schedule_kind::gpipe, 2, 1}); });
  BOOST_TEST(msg == "stage 0 (lstm 0-2) needs 300 B but device cpu:0 has 250 B");
  BOOST_TEST(ranges_of(sp::place_layers(m, cpus(2, 250), sp::parse_partition("even", 4, 2), {schedule_kind::gpipe, 2, 1})) ==
             (std::vector<layer_range>{{0, 1}, {2, 3}}));
}

BOOST_AUTO_TEST_CASE(to_string_prints_one_line_per_stage_and_a_summary) {
  // Stage 1 is the bottleneck: 8 x 30 ms, plus stage 0's first forward (8.5 ms) before it and
  // stage 0's last backward (16.5 ms) after it = 265 ms.
  auto m = uniform_model(8, 0.002, 0.004, 256ull << 20);
  m.embedding = {0.0005, 0.0005, 1ull << 30, 0};
  m.decoder = {0.003, 0.003, 1ull << 30, 0};
  const auto placed = sp::place_layers(m, cpus(2, 16ull << 30), sp::parse_partition("0-3,4-7", 8, 2),
                                       {schedule_kind::one_f_one_b, 8, 1});
  BOOST_TEST(placed.to_string() ==
             "stage 0 (cpu:0): embedding + lstm 0-3, 200 ms/step (25.0 ms per micro-batch), 2.0 GiB of 16.0 GiB\n"
             "stage 1 (cpu:1): lstm 4-7 + decoder, 240 ms/step (30.0 ms per micro-batch), 2.0 GiB of 16.0 GiB\n"
             "slowest stage 1; predicted step 265 ms with 1f1b, 8 micro-batches: bubble 17.0%\n");
}

BOOST_AUTO_TEST_CASE(even_gives_the_first_devices_the_extra_layers) {
  auto ranges = [](int l, int d) { return sp::parse_partition("even", l, d).ranges; };
  BOOST_TEST((ranges(8, 2) == std::vector<layer_range>{{0, 3}, {4, 7}}));
  BOOST_TEST((ranges(10, 4) == std::vector<layer_range>{{0, 2}, {3, 5}, {6, 7}, {8, 9}}));
  BOOST_TEST((ranges(3, 3) == std::vector<layer_range>{{0, 0}, {1, 1}, {2, 2}}));
  BOOST_TEST((ranges(5, 1) == std::vector<layer_range>{{0, 4}}));
  BOOST_TEST((sp::parse_partition("even", 5, 2).kind == sp::partition_spec::kind_t::even));
  BOOST_TEST((sp::parse_partition(" auto ", 5, 2).kind == sp::partition_spec::kind_t::automatic));
}

BOOST_AUTO_TEST_CASE(explicit_lists_name_one_lstm_range_per_device) {
  BOOST_TEST((sp::parse_partition("0-3,4-7", 8, 2).ranges == std::vector<layer_range>{{0, 3}, {4, 7}}));
  BOOST_TEST((sp::parse_partition(" 0-2 , 3 ,4-7", 8, 3).ranges == std::vector<layer_range>{{0, 2}, {3, 3}, {4, 7}}));
  BOOST_TEST((sp::parse_partition("0-3,4-7", 8, 2).kind == sp::partition_spec::kind_t::explicit_ranges));
}

BOOST_AUTO_TEST_CASE(every_bad_partition_is_rejected_with_one_sentence) {
  auto err = [](const char* text, int layers, int devices) {
    return invalid_argument_of([&] { sp::parse_partition(text, layers, devices); });
  };
  BOOST_TEST(err("0-3,5-7", 8, 2) == "partition '0-3,5-7' leaves LSTM layer 4 unassigned");
  BOOST_TEST(err("1-3,4-7", 8, 2) == "partition '1-3,4-7' leaves LSTM layer 0 unassigned");
  BOOST_TEST(err("0-3,4-6", 8, 2) == "partition '0-3,4-6' leaves LSTM layer 7 unassigned");
  BOOST_TEST(err("4-7,0-3", 8, 2) == "partition '4-7,0-3' leaves LSTM layer 0 unassigned");
  BOOST_TEST(err("0-4,4-7", 8, 2) ==
             "partition '0-4,4-7' assigns LSTM layer 4 twice (ranges must follow each other in device order)");
  BOOST_TEST(err("0-3,4-8", 8, 2) == "partition '0-3,4-8' names LSTM layer 8 but the model has 8 (0-7)");
  BOOST_TEST(err("0-3,7-4", 8, 2) == "partition '0-3,7-4' has range 7-4 whose first layer is after its last");
  BOOST_TEST(err("0-7", 8, 2) == "partition '0-7' names 1 ranges for 2 devices; expected one range per device");
  BOOST_TEST(err("0-1,2-3,4-7", 8, 2) == "partition '0-1,2-3,4-7' names 3 ranges for 2 devices; expected one range per device");
  BOOST_TEST(err("", 8, 2) == "partition '' is empty; expected auto, even or LSTM layer ranges such as 0-3,4-7");
  BOOST_TEST(err("Auto", 8, 2) ==
             "partition 'Auto' has 'Auto' where a range of LSTM layers such as 4-7 was expected (or auto, even)");
  BOOST_TEST(err("0-3,", 8, 2) == "partition '0-3,' has '' where a range of LSTM layers such as 4-7 was expected (or auto, even)");
  BOOST_TEST(err("0--3,4-7", 8, 2) ==
             "partition '0--3,4-7' has '0--3' where a range of LSTM layers such as 4-7 was expected (or auto, even)");
  BOOST_TEST(err("-1-3,4-7", 8, 2) ==
             "partition '-1-3,4-7' has '-1-3' where a range of LSTM layers such as 4-7 was expected (or auto, even)");
  BOOST_TEST(err("0-3;4-7", 8, 2) ==
             "partition '0-3;4-7' has '0-3;4-7' where a range of LSTM layers such as 4-7 was expected (or auto, even)");
  BOOST_TEST(err("0-3,4-99999999999", 8, 2) ==
             "partition '0-3,4-99999999999' has '4-99999999999' where a range of LSTM layers such as 4-7 was expected "
             "(or auto, even)");
  BOOST_TEST(err("even", 2, 3) == "cannot place 2 LSTM layers on 3 devices: every device needs at least one LSTM layer");
  BOOST_TEST(err("auto", 4, 0) == "cannot partition onto 0 devices; it needs at least 1");
  BOOST_TEST(err("auto", 0, 1) == "cannot partition a model with 0 LSTM layers; it needs at least 1");
}

BOOST_AUTO_TEST_CASE(inconsistent_inputs_to_place_layers_are_rejected) {
  const auto m = uniform_model(4, 1, 1);
  const sp::pipeline_shape shape{schedule_kind::one_f_one_b, 4, 1};
  BOOST_TEST(invalid_argument_of([&] { sp::place_layers(m, {}, {}, shape); }) == "cannot place layers on an empty device list");
  BOOST_TEST(invalid_argument_of([&] { sp::place_layers(m, cpus(5), {}, shape); }) ==
             "cannot place 4 LSTM layers on 5 devices: every device needs at least one LSTM layer");
  const auto spec_for_8 = sp::parse_partition("0-3,4-7", 8, 2);
  BOOST_TEST(contains(invalid_argument_of([&] { sp::place_layers(m, cpus(2), spec_for_8, shape); }),
                      "do not cover LSTM layers 0-3 on 2 devices"));
  BOOST_TEST(invalid_argument_of([&] { sp::place_layers(m, cpus(2), {}, {schedule_kind::one_f_one_b, 0, 1}); }) ==
             "a pipeline needs at least 1 micro-batch per step, got 0");
  auto nan = m;
  nan.lstm[2].backward_s = std::nan("");
  BOOST_TEST(invalid_argument_of([&] { sp::place_layers(nan, cpus(2), {}, shape); }) ==
             "the measured times of LSTM layer 2 must be finite and non-negative");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace partitioner_test
