#include "strata/pipeline/stage_actor.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <type_traits>

#include "strata/device_messages.hpp"
#include "strata/trace.hpp"

namespace strata::pipeline {

namespace {

/// The stage's stream has completed its computes of `step` (then the report is read).
struct computes_complete {
  std::uint64_t step;
  std::size_t instance;
};
/// The stage's stream has completed the update of `step`.
struct update_complete {
  std::uint64_t step;
  std::size_t instance;
};
/// Work on the stage's stream failed: delivered instead of computes_complete / update_complete.
/// Carries the stream's error itself, to tell whether it came in with a neighbour's tensor.
struct stream_failure {
  std::uint64_t step;
  std::size_t instance;
  std::exception_ptr error;
};

/// The stream has done the work an exchange submitted: its request may leave.
struct exchange_ready {
  std::uint64_t step;
  std::size_t instance;
};

/// One of a restarted instance's retired streams has finished its queued work (failed or not).
struct retired_drained {
  std::size_t instance;
};

/// A failure already reported to the driver (guarded() does not report it again).
class reported_failure : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The key of the "pipeline.device" trace tag: (kind << 16) | ordinal, kind 0 cpu, 1 cuda, 2 sim.
std::uint32_t device_key(const device& d) {
  const std::uint32_t kind = d.kind() == device_kind::cpu ? 0 : d.kind() == device_kind::cuda ? 1 : 2;
  return (kind << 16) | (static_cast<std::uint32_t>(d.index()) & 0xffffu);
}

constexpr std::uint64_t device_track_base = 1'000'000'000ull;

}  // namespace

stage_context::links stage_links(const plan& p, const pipeline_actors& actors, std::size_t s,
                                 const pipeline_options& options) {
  stage_context::links l;
  l.prev = s > 0 ? actors.stages[s - 1] : actor_ref{};
  l.next = s + 1 < actors.stages.size() ? actors.stages[s + 1] : actor_ref{};
  l.driver = actors.driver;
  l.store = options.store;
  l.actions = p.stages[s];
  l.chunks = static_cast<std::size_t>(p.chunks);
  l.copy_always = options.copy_always;
  l.update_timeout = options.update_timeout;
  return l;
}

// ---- basic_stage_actor ---------------------------------------------------------------------------

basic_stage_actor::basic_stage_actor(std::shared_ptr<stage_context> context) : context_(std::move(context)) {
  instance_ = context_->claim_instance();
  compute_ = context_->compute();
}

behavior basic_stage_actor::make_behavior() {
  if (trace::enabled()) {
    trace::emit(trace::event_kind::tag, id(), 0, trace::intern("pipeline.stage"), 0, static_cast<std::uint32_t>(index()));
    trace::emit(trace::event_kind::tag, id(), 0, trace::intern("pipeline.device"), 0, device_key(context_->get_device()));
  }
  if (instance_ > 1) announce_when_drained();
  return {
      [this](const begin_step& b) { on_begin_step(b); },
      [this](stage_activation& m) {
        if (phase_ == phase::failed) return;
        activations_[{m.t.step, unit(m.t.micro_batch, m.t.chunk)}] = std::move(m.t.data);
        guarded([&] { advance(); });
      },
      [this](stage_gradient& m) {
        if (phase_ == phase::failed) return;
        gradients_[{m.t.step, unit(m.t.micro_batch, m.t.chunk)}] = std::move(m.t.data);
        guarded([&] { advance(); });
      },
      [this](const computes_complete& c) {
        if (c.instance != instance_ || c.step != step_ || phase_ != phase::awaiting_compute) return;
        phase_ = phase::awaiting_update;
        std::vector<double> report;
        guarded([&] { report = model_report(); });
        if (phase_ == phase::failed) return;
        send(links_.driver, stage_computed{index(), step_, std::move(report)});
      },
      [this](const stage_update& u) {
        if (u.step != step_ || phase_ != phase::awaiting_update) return;
        phase_ = phase::running;
        ++pos_;  // past push_gradients: the update pushes now
        guarded([&] {
          traced("update", 0, 0, [&] { model_update(u.args); });
          advance();
        });
      },
      [this](const update_complete& u) {
        if (u.instance != instance_ || u.step != step_ || phase_ != phase::finishing) return;
        phase_ = phase::idle;
        send(links_.driver, stage_updated{index(), step_});
      },
      [this](const stream_failure& f) { on_stream_failure(f.step, f.instance, f.error); },
      [this](const exchange_ready& r) {
        if (r.instance != instance_ || r.step != step_ || phase_ == phase::failed) return;
        guarded([&] { model_send_exchange(); });
      },
      [this](const retired_drained& d) {
        if (d.instance == instance_ && --undrained_ == 0)
          if (auto driver = context_->get_links().driver) send(driver, stage_started{index(), instance_});
      },
      [this](const restart_stage& r) -> void {
        throw reported_failure(r.reason.empty() ? "stage " + std::to_string(index()) + " restarts on its owner's request"
                                                : r.reason);
      },
      [this](stage_task& t) -> expected<void> { return t.run(compute_); },
  };
}

void basic_stage_actor::announce_when_drained() {
  // A restart: the driver waits for every stage's new instance before the next step, and this one
  // says it runs only once its earlier instances' streams have finished what they had queued (a
  // failed stream skips it), so that no old work (a late gradient accumulation) overlaps the next
  // step or abandon_step.
  auto old = context_->retired();
  undrained_ = old.size() + 1;
  for (auto& s : old) notify_when_done(s, retired_drained{instance_});
  send(self(), retired_drained{instance_});
}

void basic_stage_actor::on_begin_step(const begin_step& b) {
  if (phase_ == phase::failed) {
    // Only a driver that did not restart this stage sends it (a stage used without step_driver).
    report_failure("stage " + std::to_string(index()) + " cannot run step " + std::to_string(b.step) +
                   ": it failed in step " + std::to_string(step_) + " and has not been restarted");
    return;
  }
  guarded([&] {
    links_ = context_->get_links();
    if (!wired_) {
      transport_ = transport(context_->get_device(), compute_, context_->copies(), links_.copy_always);
      wired_ = true;
    }
    step_ = b.step;
    std::erase_if(activations_, [&](const auto& kv) { return kv.first.first < step_; });
    std::erase_if(gradients_, [&](const auto& kv) { return kv.first.first < step_; });
    traffic_.clear();
    pos_ = 0;
    update_done_ = false;
    phase_ = phase::running;
    if (b.abandoned != 0) model_abandon_step(b.abandoned);
    model_begin_step(step_);
    advance();
  });
}

void basic_stage_actor::on_stream_failure(std::uint64_t step, std::size_t instance, const std::exception_ptr& error) {
  // An earlier instance's stream, or an earlier step's notice: that failure was handled.
  if (instance != instance_ || step != step_ || phase_ == phase::failed) return;
  const std::string what = "stage " + std::to_string(index()) + " device work failed: " + device_failure_text(error);
  report_failure(what, inherited_from(error));
  if (!restarts_by_driver()) throw reported_failure(what);
}

int basic_stage_actor::inherited_from(const std::exception_ptr& error) const {
  // A stream that waits on an event carrying an error adopts that very exception object, and the
  // events it records afterwards carry it on. The error can come back (a stage's failed activation
  // returns as a failed gradient), so what counts is where it shows first in stream order: an
  // incoming tensor (it came in with that neighbour's data) or an outgoing one (it started here).
  for (const auto& t : traffic_)
    if (t.ready.error() == error) return t.from;
  return -1;
}

bool basic_stage_actor::restarts_by_driver() const {
  return static_cast<bool>(wired_ ? links_.driver : context_->get_links().driver);
}

void basic_stage_actor::guarded(const std::function<void()>& f) {
  try {
    f();
  } catch (const reported_failure&) {
    if (!restarts_by_driver()) throw;
  } catch (const std::exception& e) {
    report_failure(e.what());
    if (!restarts_by_driver()) throw;
  }
}

void basic_stage_actor::send_when_stream_done() { notify_when_done(compute_, exchange_ready{step_, instance_}); }

void basic_stage_actor::update_finished() {
  update_done_ = true;
  advance();
}

void basic_stage_actor::report_failure(const std::string& what, int inherited_from) {
  phase_ = phase::failed;
  const actor_ref driver = wired_ ? links_.driver : context_->get_links().driver;
  if (driver) send(driver, stage_failed{index(), step_, what, inherited_from});
}

void basic_stage_actor::fail(const std::string& what) {
  report_failure(what);
  throw reported_failure(what);
}

template <class T>
void basic_stage_actor::notify_when_done(stream& on, T msg) {
  // Tagged with this instance and step, so that a restarted instance ignores it; a failure comes
  // with the stream's error itself (inherited_from compares it with the step's tensors' events).
  if constexpr (std::is_same_v<T, retired_drained>) {
    send_on_complete(on, self(), msg, [msg](std::exception_ptr) { return msg; });  // failed or not: drained
  } else {
    send_on_complete(on, self(), std::move(msg), [step = step_, instance = instance_](std::exception_ptr e) {
      return stream_failure{step, instance, std::move(e)};
    });
  }
}

void basic_stage_actor::traced(const char* name, std::size_t mb, std::size_t ch, const std::function<void()>& submit) {
  if (!trace::enabled() || context_->get_device().kind() == device_kind::sim) {  // sim work has modelled times only
    submit();
    return;
  }
  // One slice from when the stream reaches the unit's first work to when it finishes the last.
  struct span {
    std::atomic<std::int64_t> begin{0};
  };
  auto times = std::make_shared<span>();
  const auto submitted = std::chrono::steady_clock::now();
  compute_.record().then([times](std::exception_ptr) {
    times->begin.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_release);
  });
  submit();
  const std::string label = std::string(name) == "update"
                                ? std::string(name)
                                : std::string(name) + " mb " + std::to_string(mb) + " chunk " + std::to_string(ch);
  const std::uint32_t label_id = trace::intern(label);
  const std::uint64_t track = device_track_base + static_cast<std::uint64_t>(index());
  const std::uint64_t stream_id = compute_.id();
  compute_.record().then([times, submitted, label_id, track, stream_id](std::exception_ptr failure) {
    if (failure) return;  // skipped work: nothing ran
    static std::atomic<std::uint64_t> work_ids{1};
    const auto end = std::chrono::steady_clock::now();
    auto begin = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(times->begin.load(std::memory_order_acquire)));
    if (begin < submitted) begin = submitted;  // an idle stream starts the work when it is submitted
    if (begin > end) begin = end;
    const std::uint64_t work = work_ids.fetch_add(1, std::memory_order_relaxed);
    trace::emit_at(begin, trace::event_kind::device_begin, track, stream_id, work, 0, label_id);
    trace::emit_at(end, trace::event_kind::device_end, track, stream_id, work, 0, label_id);
  });
}

std::size_t basic_stage_actor::unit(int mb, int ch) const noexcept {
  return static_cast<std::size_t>(mb) * links_.chunks + static_cast<std::size_t>(ch);
}

void basic_stage_actor::send_output(const action& a, tensor t, bool forward) {
  const actor_ref& to = forward ? links_.next : links_.prev;
  if (!to)
    fail("stage " + std::to_string(index()) + "'s plan sends (" + pipeline::to_string(a) + ") to a stage it does not have");
  t.set_ready_event(compute_.record());
  traffic_.push_back({t.ready_event(), -1});
  stage_tensor out{step_, a.micro_batch, a.chunk, std::move(t)};
  if (forward) send(to, stage_activation{std::move(out)});
  else send(to, stage_gradient{std::move(out)});
}

void basic_stage_actor::advance() {
  const auto& actions = links_.actions;
  while (phase_ == phase::running && pos_ < actions.size()) {
    const action& a = actions[pos_];
    const auto mb = static_cast<std::size_t>(a.micro_batch), ch = static_cast<std::size_t>(a.chunk);
    switch (a.kind) {
      case action_kind::recv_activation: {
        auto it = activations_.find({step_, unit(a.micro_batch, a.chunk)});
        if (it == activations_.end()) return;
        traffic_.push_back({it->second.ready_event(), index() - 1});
        tensor t = transport_.receive(it->second, 2 * it->first.second);
        activations_.erase(it);
        model_accept_input(mb, ch, t);
        break;
      }
      case action_kind::forward:
        if (trace::enabled())
          trace::emit(trace::event_kind::tag, id(), 0, trace::intern("pipeline.forward"), 0, static_cast<std::uint32_t>(mb));
        traced("forward", mb, ch, [&] { model_forward(mb, ch); });
        break;
      case action_kind::send_activation:
        send_output(a, model_output(mb, ch), true);
        break;
      case action_kind::recv_gradient: {
        auto it = gradients_.find({step_, unit(a.micro_batch, a.chunk)});
        if (it == gradients_.end()) return;
        traffic_.push_back({it->second.ready_event(), index() + 1});
        tensor t = transport_.receive(it->second, 2 * it->first.second + 1);
        gradients_.erase(it);
        model_accept_output_grad(mb, ch, t);
        break;
      }
      case action_kind::backward:
        if (trace::enabled())
          trace::emit(trace::event_kind::tag, id(), 0, trace::intern("pipeline.backward"), 0, static_cast<std::uint32_t>(mb));
        traced("backward", mb, ch, [&] { model_backward(mb, ch); });
        break;
      case action_kind::send_gradient:
        send_output(a, model_input_grad(mb, ch), false);
        break;
      case action_kind::push_gradients:
        // The driver needs every stage's report before anyone pushes (a global norm, a loss).
        model_end_compute();
        notify_when_done(compute_, computes_complete{step_, instance_});
        phase_ = phase::awaiting_compute;
        return;
      case action_kind::pull_weights:
        if (!update_done_) return;
        break;
    }
    ++pos_;
  }
  if (phase_ == phase::running && pos_ == actions.size()) {
    phase_ = phase::finishing;
    notify_when_done(compute_, update_complete{step_, instance_});
  }
}

}  // namespace strata::pipeline
