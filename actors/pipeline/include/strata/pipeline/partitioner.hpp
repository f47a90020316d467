#pragma once
/// \file
/// The partitioner: places the model's layers (embedding, L LSTM layers, decoder + loss) on D
/// devices as contiguous stages, from measured per-layer costs, and predicts the step time and
/// bubble of the result with the pipeline simulator.
///
/// Example:
/// \code
///   using namespace strata::pipeline;
///   model_costs m = ...;                                  // measured, per micro-batch
///   std::vector<device_slot> devs = {{"cuda:0", 80ull << 30}, {"cuda:1", 80ull << 30}};
///   auto spec = parse_partition("auto", m.lstm.size(), devs.size());   // from --partition
///   auto placed = place_layers(m, devs, spec, {schedule_kind::one_f_one_b, 8, 1});
///   std::cout << placed.to_string();
///   // The two devices on two ranks, over the link strata-bench-net measured:
///   auto across = place_layers(m, devs, spec, {schedule_kind::one_f_one_b, 8, 1},
///                              {{{0, 1}, 2}, link_model::measured(9.8, 2.96)});
/// \endcode

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/simulator.hpp"

namespace strata::pipeline {

/// What one layer costs, measured per micro-batch (all T timesteps).
struct layer_cost {
  double forward_s = 0;               ///< Forward time of one micro-batch, seconds.
  double backward_s = 0;              ///< Backward time of one micro-batch, seconds.
  std::uint64_t memory_bytes = 0;     ///< Resident: weights, gradients, optimiser state.
  std::uint64_t activation_bytes = 0; ///< Kept from a micro-batch's forward until its backward.
  /// Its output for one micro-batch: what crosses a cut right after this layer (to the next
  /// stage; the gradient coming back has the same shape). Only matters across ranks.
  std::uint64_t output_bytes = 0;
};

/// The model's layers in pipeline order: embedding, lstm[0..L-1], decoder + loss.
struct model_costs {
  layer_cost embedding{};
  std::vector<layer_cost> lstm{};
  layer_cost decoder{};
};

/// A device the partitioner may place a stage on.
struct device_slot {
  std::string name{};  ///< "cpu:0", "cuda:1": for printing only.
  std::uint64_t memory_limit = std::numeric_limits<std::uint64_t>::max();  ///< Bytes available.
};

/// A contiguous range of LSTM layers, both ends included.
struct layer_range {
  int first = 0;
  int last = 0;
  friend bool operator==(const layer_range&, const layer_range&) = default;
};

/// How to place the layers: the parsed `--partition` flag.
struct partition_spec {
  enum class kind_t : std::uint8_t { automatic, even, explicit_ranges } kind = kind_t::automatic;
  /// One range per device, covering 0..L-1 in order; empty for `automatic`.
  std::vector<layer_range> ranges{};
};

/// Parses `--partition auto|even|0-3,4-7` for a model of `lstm_layers` LSTM layers on `devices`
/// devices. `even` gives each device floor(L/D) or ceil(L/D) layers (the first L mod D devices
/// get one more); a list names one LSTM range per device ("5" is "5-5"), in device order,
/// covering 0..L-1 exactly. Throws `std::invalid_argument` with one sentence naming the input
/// and the problem, e.g. "partition '0-3,5-7' leaves LSTM layer 4 unassigned". Every device
/// needs at least one LSTM layer, so D <= L.
partition_spec parse_partition(std::string_view text, int lstm_layers, int devices);

/// How the placed pipeline will run: the schedule used to predict the bubble, and to size the
/// activation memory each stage holds (peak in-flight micro-batches of that schedule).
struct pipeline_shape {
  schedule_kind schedule = schedule_kind::one_f_one_b;
  int micro_batches = 1;
  int chunks = 1;
};

/// Which rank (or machine) each device is on and what the link between two ranks costs. A cut
/// between devices on different ranks sends each micro-batch's activation (the output of the
/// last LSTM layer before the cut, `layer_cost::output_bytes`) forward and its gradient back
/// over the link; cuts inside a rank stay free. Empty `placement.ranks`: every device on one rank.
struct cross_rank_links {
  rank_placement placement{};  ///< placement.ranks[d]: the rank of devices[d].
  link_model link{};
};

/// One device's stage in a placement.
struct stage_placement {
  int device = 0;
  std::string device_name{};
  bool has_embedding = false;  ///< True for the first stage.
  layer_range lstm{};          ///< Its LSTM layers.
  bool has_decoder = false;    ///< True for the last stage.
  double forward_s = 0;        ///< Per micro-batch.
  double backward_s = 0;       ///< Per micro-batch.
  std::uint64_t memory_bytes = 0;  ///< Resident + activations at the schedule's peak in flight.
  std::uint64_t memory_limit = 0;
  double step_s = 0;           ///< Compute per step: micro_batches * (forward_s + backward_s).
  int rank = 0;                ///< Its rank (0 without `cross_rank_links`).
  std::uint64_t output_bytes = 0;  ///< Per micro-batch, to the next stage (0 for the last).
  /// Per micro-batch message to the next stage over the link: latency + output_bytes /
  /// bandwidth; 0 when the next stage is on the same rank (and for the last stage).
  double link_s = 0;
};

/// Where the layers go and what that is predicted to cost.
struct placement {
  std::vector<stage_placement> stages{};
  pipeline_shape shape{};
  int slowest_stage = 0;         ///< The stage with the largest forward + backward.
  double predicted_step_s = 0;   ///< The simulator's makespan for the shape's schedule.
  double predicted_bubble = 0;   ///< The simulator's ideal bubble.
  bool across_ranks = false;     ///< Some cut crosses ranks (then `to_string` names ranks and links).

  /// One line per stage, then a summary, e.g.
  /// "stage 0 (cpu:0): embedding + lstm 0-3, 212 ms/step (26.5 ms per micro-batch), 3.1 GiB of 16 GiB".
  std::string to_string() const;
};

/// Places the layers on `devices` following `spec`: stage d runs on devices[d]; the embedding
/// joins the first stage and the decoder the last; every stage holds at least one LSTM layer.
/// `automatic` minimises the slowest stage's forward + backward (exact dynamic programme over
/// contiguous splits, O(D * L^2)) subject to each device's memory limit, ties to the split whose
/// earlier stages are larger; then takes the memory-feasible split whose plan under `shape`
/// simulates the shortest step, ties to the smaller bottleneck (all splits when there are at
/// most 4096, else one-layer boundary moves from the programme's split). A stage's memory is its layers' `memory_bytes` plus their
/// `activation_bytes` times the peak micro-batches in flight on that stage under `shape`.
///
/// With `links` naming devices on several ranks, every cut between two ranks costs its link:
/// the programme's bottleneck also counts each such cut's transfer (output_bytes / bandwidth per
/// micro-batch, each direction of a link being a resource of its own), and the simulated step
/// has the link's latency and queueing on those boundaries (`with_links`). So a slow link moves
/// cuts to where activations are smallest when compute allows. Without `links` (or with every
/// device on one rank, or a free link) the result is exactly the 4-argument one.
///
/// Throws `std::invalid_argument` with one sentence when the inputs are inconsistent (no
/// devices, no LSTM layers, more devices than LSTM layers, a spec for another layer or device
/// count, a bad shape, a bad link or rank placement: `check_link`, `check_rank_placement`),
/// when a given placement exceeds a device's memory, or when no contiguous split fits in memory.
placement place_layers(const model_costs& model, const std::vector<device_slot>& devices, const partition_spec& spec,
                       const pipeline_shape& shape);
placement place_layers(const model_costs& model, const std::vector<device_slot>& devices, const partition_spec& spec,
                       const pipeline_shape& shape, const cross_rank_links& links);

/// The bytes crossing each cut of `ranges` per micro-batch (the output of the last LSTM layer
/// before it): D - 1 entries, as `with_links` takes them. For tests and tools.
std::vector<double> boundary_bytes_of(const model_costs& model, const std::vector<layer_range>& ranges);

/// The largest forward + backward of any stage when LSTM layers are split as `ranges`
/// (embedding on the first, decoder on the last). For tests and tools.
double bottleneck_of(const model_costs& model, const std::vector<layer_range>& ranges);

}  // namespace strata::pipeline
