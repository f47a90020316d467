#pragma once
/// \file
/// Measured per-layer costs of the LSTM language model, for the partitioner
/// (`pipeline::place_layers`, `lstm_lm train --partition auto`).
///
/// Example:
/// \code
///   auto devices = strata::make_devices("cpu:2");
///   auto costs = strata::lm::measure_layer_costs(config, devices[0]);   // ~ the time of a few steps
///   auto placed = strata::pipeline::place_layers(costs, slots, spec, shape);
/// \endcode

#include "strata/lm/config.hpp"
#include "strata/pipeline/partitioner.hpp"
#include "strata/device/device.hpp"

namespace strata::lm {

/// How many times measure_layer_costs runs each layer on a cpu or cuda device.
struct cost_measurement_options {
  int warmup = 1;       ///< untimed runs first (caches, the allocator, oneTBB's threads)
  int repetitions = 3;  ///< timed runs; the median is reported
};

/// Measures what each layer of `config`'s model costs per micro-batch (`micro_batch_size()`
/// columns, all `seq` timesteps, run as `chunks` time chunks exactly as a pipeline stage runs it).
///
/// - **cpu and cuda devices:** runs each distinct layer for real with the device's kernels
///   (strata::kernels::cpu inside the device's arena; strata::kernels::cuda on its stream), as
///   work items on a stream of `dev`, timed by the device's work observer (cpu: steady-clock
///   times on the arena thread; cuda: CUDA events): the embedding forward and backward,
///   an LSTM layer with input `embed` (layer 0), an LSTM layer with input `hidden` (its time is
///   reused for layers 1..L-1, which have the same shape), and the fused decoder + cross-entropy
///   (forward and backward in one pass, reported as forward; backward 0, as the stage runs it).
///   Each is the median of `repetitions` timed runs after `warmup` untimed ones.
/// - **sim device:** submits the same work items' costs (FLOPs, bytes: what the pipeline's stages
///   submit) and reports the modelled durations read from the device's work observer. The
///   observer is replaced during the call and removed at its end.
/// - **memory** (either kind) is layer_memory_costs(config).
///
/// Takes roughly (warmup + repetitions) x one step's compute. Replaces `dev`'s work observer
/// during the call and removes it at its end: not for a device a pipeline is using.
/// \throws std::invalid_argument for an invalid config (or a cuda device in a build without
///         CUDA); what the kernels throw.
pipeline::model_costs measure_layer_costs(const lm::config& config, device& dev,
                                          const cost_measurement_options& options = {});

/// A device's rates for estimate_layer_costs. The defaults are about what one core of a 2-core
/// build machine reaches on the seed model.
struct nominal_rates {
  double flops_per_s = 60e9;
  double bytes_per_s = 20e9;
};

/// Per-layer costs estimated without running anything: each layer's work per micro-batch (the
/// kernels' FLOPs and bytes, strata/kernels/costs.hpp, over `seq` timesteps of
/// `micro_batch_size()` columns) at `rates`; memory as layer_memory_costs. A rough guide: only
/// the ratios matter to the partitioner. The fused decoder's forward carries its backward.
/// \throws std::invalid_argument for an invalid config or rates that are not positive.
pipeline::model_costs estimate_layer_costs(const lm::config& config, const nominal_rates& rates = {});

/// Memory only (times 0), from the sizes of the buffers a pipeline stage allocates for each layer:
/// `memory_bytes` = weights + gradients (float32; the decoder also its cross-entropy workspace),
/// `activation_bytes` = what one micro-batch keeps from its forward to its backward (embedding
/// output; LSTM output, reserve, chunk states and the backward's dh/dc carry; the decoder's dh).
pipeline::model_costs layer_memory_costs(const lm::config& config);

}  // namespace strata::lm
