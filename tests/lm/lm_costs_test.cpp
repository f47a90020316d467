// measure_layer_costs: per-layer costs for the partitioner, measured with the kernels on cpu
// devices and modelled on sim devices.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "support/lm_test_support.hpp"
#include "strata/lm/costs.hpp"
#include "strata/pipeline/partitioner.hpp"
#include "strata/device/device_manager.hpp"

namespace lm = strata::lm;
namespace pl = strata::pipeline;

namespace lm_costs_test {

double total(const pl::layer_cost& c) { return c.forward_s + c.backward_s; }

int layers_of(const pl::stage_placement& s) { return s.lstm.last - s.lstm.first + 1; }

// The seed model's vocabulary and width; embed = hidden so that layer 0 (measured on its own)
// has the shape of layers 1..L-1 (measured once and reused); a short window keeps it quick.
lm::config wide_decoder_model() {
  lm::config c = strata::lm::test::config_of(10000, 400, 400, 8, 10, 10);
  return c;
}

// Under a sanitizer the kernels' own loops are instrumented and OpenBLAS's are not, so measured
// times no longer follow the FLOPs (a TSan run measured the decoder below one LSTM layer): the
// comparisons of measured times are asserted in uninstrumented builds only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool timings_follow_flops = false;
#else
constexpr bool timings_follow_flops = true;
#endif

BOOST_AUTO_TEST_SUITE(lm_costs)

BOOST_AUTO_TEST_CASE(cpu_costs_are_measured_per_layer_and_the_partitioner_gives_the_decoder_stage_fewer_layers) {
  const auto c = wide_decoder_model();
  auto devices = strata::make_devices("cpu:1");
  const auto m = lm::measure_layer_costs(c, devices[0]);

  BOOST_TEST(m.embedding.forward_s > 0);
  BOOST_TEST(m.embedding.backward_s > 0);
  BOOST_TEST(m.decoder.forward_s > 0);
  BOOST_TEST(m.decoder.backward_s == 0);  // the fused decoder's backward runs in its forward
  BOOST_REQUIRE_EQUAL(m.lstm.size(), c.layers);
  for (std::size_t l = 0; l < m.lstm.size(); ++l) {
    BOOST_TEST(m.lstm[l].forward_s > 0);
    BOOST_TEST(m.lstm[l].backward_s > 0);
    BOOST_TEST(m.lstm[l].memory_bytes > 0u);
    BOOST_TEST(m.lstm[l].activation_bytes > 0u);
    // Layers 1..L-1 have one shape and share one measurement.
    if (l > 0) BOOST_TEST(m.lstm[l].forward_s == m.lstm[1].forward_s);
    if (l > 0) BOOST_TEST(m.lstm[l].backward_s == m.lstm[1].backward_s);
  }
  // Layer 0 has the same shape here but is measured separately: about the same time (loose: the
  // build machine is shared).
  const double ratio = total(m.lstm[0]) / total(m.lstm[1]);
  BOOST_TEST_MESSAGE("lstm 0 / lstm 1 = " << ratio << ", decoder / lstm 1 = " << total(m.decoder) / total(m.lstm[1]));
  BOOST_TEST(m.decoder.memory_bytes > m.lstm[1].memory_bytes);
  if (!timings_follow_flops) {
    BOOST_TEST_MESSAGE("instrumented build: measured times are not compared");
    return;
  }
  BOOST_TEST(ratio > 0.4);
  BOOST_TEST(ratio < 2.5);
  // V = 10000, H = 400: the decoder (6 V H FLOPs per row) outweighs an LSTM layer (24 H^2).
  BOOST_TEST(total(m.decoder) > total(m.lstm[1]));

  // The DP balances the stages, so the stage carrying the decoder gets fewer LSTM layers. Layer
  // 0's separate measurement can be off by the factor allowed above on a loaded machine (a TSan
  // run once measured it large enough to make 4 + 4 the balanced split), so the partitioner is
  // given layer 1's measurement for it: the same shape, and what the claim is about.
  auto balanced = m;
  balanced.lstm[0] = m.lstm[1];
  auto placed = pl::place_layers(balanced, {{"cpu:0"}, {"cpu:1"}}, pl::parse_partition("auto", 8, 2),
                                 {pl::schedule_kind::one_f_one_b, 1, 1});
  BOOST_TEST_MESSAGE(placed.to_string());
  BOOST_REQUIRE_EQUAL(placed.stages.size(), 2u);
  BOOST_TEST(placed.stages[1].has_decoder);
  BOOST_TEST(layers_of(placed.stages[1]) < layers_of(placed.stages[0]));
  BOOST_TEST(placed.predicted_step_s > 0);
}

BOOST_AUTO_TEST_CASE(cpu_costs_follow_the_chunking_and_memory_follows_the_buffers) {
  lm::config c = strata::lm::test::config_of(50, 8, 16, 2, 6, 4, 2);
  c.chunks = 3;
  auto devices = strata::make_devices("cpu:1");
  const auto m = lm::measure_layer_costs(c, devices[0], {0, 1});
  BOOST_TEST(m.lstm[0].forward_s > 0);
  BOOST_TEST(m.decoder.forward_s > 0);
  const auto mem = lm::layer_memory_costs(c);
  BOOST_TEST(mem.lstm[1].memory_bytes == m.lstm[1].memory_bytes);
  BOOST_TEST(mem.lstm[0].forward_s == 0);
  // weights + gradients, float32: 2 x 4 x (4H(I + H) + 8H)
  BOOST_TEST(mem.lstm[0].memory_bytes == 2u * 4u * (4u * 16u * (8u + 16u) + 8u * 16u));
  BOOST_TEST(mem.embedding.memory_bytes == 2u * 4u * 50u * 8u);
  BOOST_TEST(mem.embedding.activation_bytes == 4u * 6u * 2u * 8u);  // T x Bm x E per micro-batch
  BOOST_TEST(mem.decoder.activation_bytes == 4u * 6u * 2u * 16u);   // dh of the top layer
  for (const auto& l : mem.lstm) BOOST_TEST(l.output_bytes == 4u * 6u * 2u * 16u);  // h: T x Bm x H to a next stage
  BOOST_TEST(m.lstm[1].output_bytes == mem.lstm[1].output_bytes);
}

BOOST_AUTO_TEST_CASE(sim_costs_are_the_modelled_durations_of_the_stage_work_items) {
  auto c = wide_decoder_model();
  c.chunks = 2;
  auto devices = strata::make_devices("sim:1:cpu");  // compute-bound rates: the launch latency is small
  const auto m = lm::measure_layer_costs(c, devices[0]);
  const auto& p = *devices[0].properties().sim;
  // The decoder's work item of one chunk: max(flops / matmul rate, bytes / bandwidth) + latency,
  // the flops and bytes the last stage submits (lm_stage).
  const double rows = static_cast<double>(c.chunk_steps() * c.micro_batch_size()), H = 400, V = 10000;
  const double flops = 6 * rows * H * V, bytes = 4 * (3 * V * H + 2 * rows * V);
  const double chunk = std::max(flops / p.matmul_flops, bytes / p.memory_bandwidth) + p.launch_latency;
  BOOST_TEST(m.decoder.forward_s == 2 * chunk, boost::test_tools::tolerance(1e-3));
  BOOST_TEST(m.embedding.forward_s > 0);
  for (const auto& l : m.lstm) {
    BOOST_TEST(l.forward_s > 0);
    BOOST_TEST(l.backward_s > l.forward_s);
  }
  BOOST_TEST(total(m.decoder) > total(m.lstm[1]));
  auto placed = pl::place_layers(m, {{"sim:0"}, {"sim:1"}}, pl::parse_partition("auto", 8, 2),
                                 {pl::schedule_kind::one_f_one_b, 1, 1});
  BOOST_TEST(layers_of(placed.stages[1]) < layers_of(placed.stages[0]));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lm_costs_test
