#pragma once
// The MLP stage of samples/custom_pipeline updated through a parameter server (`--store`): instead
// of `update`, the stage pushes its gradients to a strata::kvstore, which applies SGD to the
// weights it holds, and pulls the new weights back (docs/pipeline.md, "Parameter server").
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mlp_stage.hpp"
#include "strata/device/all.hpp"
#include "strata/kvstore/kvstore.hpp"

namespace custom_pipeline {

/// mlp_stage's layers and step boundary, with `exchange` + `exchanged` in place of `update`.
/// Layer l's weights are key l of the store (every stage shares one store). Private inheritance:
/// the stage model is what the using-declarations name, so the stage actor sees no `update`.
class mlp_store_stage : private mlp_stage {
public:
  /// The reply to the exchange's request (kvstore::pushpull): the pulled weights, each with the
  /// event after which the store has written it.
  using exchange_reply = std::vector<strata::tensor>;

  using mlp_stage::mlp_stage;
  using mlp_stage::forward, mlp_stage::backward, mlp_stage::output, mlp_stage::input_grad, mlp_stage::accept_input,
      mlp_stage::accept_output_grad, mlp_stage::end_compute, mlp_stage::report, mlp_stage::set_data,
      mlp_stage::weights, mlp_stage::abandon_step;

  /// The store's initial values: this stage's layers as built (send before the first step).
  strata::kvstore::init initial_weights() const {
    strata::kvstore::init m;
    for (std::size_t k = 0; k < layer_count(); ++k) {
      m.keys.emplace_back(key(k));
      m.values.push_back(weight(k));
    }
    return m;
  }

  /// After the step's backwards: push the accumulated gradients (the store applies SGD) and pull
  /// each layer's new weights into the stage's own weight tensors, as one request.
  strata::kvstore::pushpull exchange(const std::vector<double>&, strata::stream& s) {
    // The work that wrote the gradients and last read the weights is on `s`: the store waits for
    // this event before it reads the gradients or overwrites the weights.
    const strata::event ready = s.record();
    strata::kvstore::pushpull m;
    for (std::size_t k = 0; k < layer_count(); ++k) {
      strata::tensor g = gradient(k), w = weight(k);
      g.set_ready_event(ready);
      w.set_ready_event(ready);
      m.push.keys.emplace_back(key(k));
      m.push.values.push_back(std::move(g));
      m.pull.keys.emplace_back(key(k));
      m.pull.outs.push_back(std::move(w));
    }
    return m;
  }
  /// The store has answered: the stream waits for the pulled weights, then zeroes the gradients
  /// (the store read them before it wrote the weights).
  void exchanged(exchange_reply& pulled, strata::stream& s) {
    for (const auto& w : pulled) s.wait(w.ready_event());
    zero_gradients(s);
  }
  /// Names a refused exchange: "stage 1 could not push its gradients to the kvstore during step 3: ...".
  std::string exchange_name() const { return "push its gradients to the kvstore"; }

private:
  strata::kvstore::key key(std::size_t k) const { return static_cast<std::int64_t>(first_layer() + k); }
};

}  // namespace custom_pipeline
