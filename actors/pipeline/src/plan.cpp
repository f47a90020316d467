#include "strata/pipeline/plan.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace strata::pipeline {

const char* to_string(schedule_kind kind) noexcept {
  switch (kind) {
    case schedule_kind::gpipe: return "gpipe";
    case schedule_kind::one_f_one_b: return "1f1b";
    case schedule_kind::wavefront: return "wavefront";
  }
  return "unknown";
}

schedule_kind parse_schedule(std::string_view name) {
  if (name == "gpipe") return schedule_kind::gpipe;
  if (name == "1f1b") return schedule_kind::one_f_one_b;
  if (name == "wavefront") return schedule_kind::wavefront;
  throw std::invalid_argument("schedule '" + std::string(name) + "' is unknown; expected gpipe, 1f1b or wavefront");
}

const char* to_string(action_kind kind) noexcept {
  switch (kind) {
    case action_kind::recv_activation: return "recv_activation";
    case action_kind::forward: return "forward";
    case action_kind::send_activation: return "send_activation";
    case action_kind::recv_gradient: return "recv_gradient";
    case action_kind::backward: return "backward";
    case action_kind::send_gradient: return "send_gradient";
    case action_kind::push_gradients: return "push_gradients";
    case action_kind::pull_weights: return "pull_weights";
  }
  return "unknown";
}

std::string to_string(const action& a) {
  std::string out = to_string(a.kind);
  if (a.micro_batch >= 0) out += " mb " + std::to_string(a.micro_batch) + " chunk " + std::to_string(a.chunk);
  return out;
}

std::string plan::to_string() const {
  std::ostringstream os;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    os << "stage " << s << ':';
    for (const auto& a : stages[s]) {
      if (!is_compute(a.kind)) continue;
      os << ' ' << (a.kind == action_kind::forward ? 'F' : 'B') << a.micro_batch;
      if (chunks > 1) os << '.' << a.chunk;
    }
    os << '\n';
  }
  return os.str();
}

plan plan_from_compute_order(schedule_kind schedule, int micro_batches, int chunks,
                             const std::vector<std::vector<action>>& order) {
  plan p;
  p.schedule = schedule;
  p.num_stages = static_cast<int>(order.size());
  p.micro_batches = micro_batches;
  p.chunks = chunks;
  p.stages.resize(order.size());
  const int last = p.num_stages - 1;
  for (int s = 0; s <= last; ++s) {
    auto& out = p.stages[static_cast<std::size_t>(s)];
    for (const auto& a : order[static_cast<std::size_t>(s)]) {
      if (a.kind == action_kind::forward) {
        if (s > 0) out.push_back({action_kind::recv_activation, a.micro_batch, a.chunk});
        out.push_back(a);
        if (s < last) out.push_back({action_kind::send_activation, a.micro_batch, a.chunk});
      } else if (a.kind == action_kind::backward) {
        if (s < last) out.push_back({action_kind::recv_gradient, a.micro_batch, a.chunk});
        out.push_back(a);
        if (s > 0) out.push_back({action_kind::send_gradient, a.micro_batch, a.chunk});
      } else {
        out.push_back(a);  // not a compute: kept as given (lets tests build odd plans)
      }
    }
    out.push_back({action_kind::push_gradients, -1, -1});
    out.push_back({action_kind::pull_weights, -1, -1});
  }
  return p;
}

namespace {

void require(bool ok, const std::string& sentence) {
  if (!ok) throw std::invalid_argument(sentence);
}

/// Forward units in the order they enter the pipeline: micro-batch major, chunks ascending
/// (chunk c needs chunk c-1's final h/c state).
std::vector<action> forward_units(int micro_batches, int chunks) {
  std::vector<action> units;
  for (int mb = 0; mb < micro_batches; ++mb)
    for (int c = 0; c < chunks; ++c) units.push_back({action_kind::forward, mb, c});
  return units;
}

/// Backward units in the order 1F1B retires them: micro-batch major, chunks descending
/// (chunk c needs dh/dc from chunk c+1 of the same layer).
std::vector<action> backward_units(int micro_batches, int chunks) {
  std::vector<action> units;
  for (int mb = 0; mb < micro_batches; ++mb)
    for (int c = chunks - 1; c >= 0; --c) units.push_back({action_kind::backward, mb, c});
  return units;
}

}  // namespace

plan make_plan(schedule_kind schedule, int num_stages, int micro_batches, int chunks) {
  require(num_stages >= 1, "a pipeline needs at least 1 stage, got " + std::to_string(num_stages));
  require(micro_batches >= 1, "a pipeline needs at least 1 micro-batch per step, got " + std::to_string(micro_batches));
  require(chunks >= 1, "a micro-batch needs at least 1 time chunk, got " + std::to_string(chunks));
  require(chunks == 1 || schedule == schedule_kind::wavefront,
          std::string("the ") + to_string(schedule) + " schedule sends whole micro-batches, so chunks must be 1 (got " +
              std::to_string(chunks) + "); use the wavefront schedule for time chunks");

  const auto fwd = forward_units(micro_batches, chunks);
  const auto bwd = backward_units(micro_batches, chunks);
  const int units = micro_batches * chunks;
  std::vector<std::vector<action>> order(static_cast<std::size_t>(num_stages));

  for (int s = 0; s < num_stages; ++s) {
    auto& o = order[static_cast<std::size_t>(s)];
    if (schedule == schedule_kind::gpipe) {
      o = fwd;
      for (int mb = micro_batches - 1; mb >= 0; --mb) o.push_back({action_kind::backward, mb, 0});
      continue;
    }
    // 1F1B over units. Stage s runs `warmup` forwards, then alternates one forward / one
    // backward, then drains the remaining backwards. The last stage must finish all C chunks of
    // a micro-batch before its first backward (BPTT starts at the last timestep), hence C-1
    // extra warm-up units on every stage; with C = 1 this is Megatron's S-s-1.
    const int warmup = std::min(units, num_stages - s - 1 + chunks - 1);
    int f = 0;
    int b = 0;
    while (f < warmup) o.push_back(fwd[static_cast<std::size_t>(f++)]);
    while (f < units) {
      o.push_back(fwd[static_cast<std::size_t>(f++)]);
      o.push_back(bwd[static_cast<std::size_t>(b++)]);
    }
    while (b < units) o.push_back(bwd[static_cast<std::size_t>(b++)]);
  }
  return plan_from_compute_order(schedule, micro_batches, chunks, order);
}

}  // namespace strata::pipeline
