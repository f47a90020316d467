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

/// One of a restarted instance's retired streams has finished its queued work (failed or not).
struct retired_drained {
  std::size_t instance;
};

/// A failure already reported to the driver (guarded() does not report it again).
class reported_failure : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "device work failed";
  }
}

/// The key of the "pipeline.device" trace tag: (kind << 16) | ordinal, kind 0 cpu, 1 cuda, 2 sim.
std::uint32_t device_key(const device& d) {
  const std::uint32_t kind = d.kind() == device_kind::cpu ? 0 : d.kind() == device_kind::cuda ? 1 : 2;
  return (kind << 16) | (static_cast<std::uint32_t>(d.index()) & 0xffffu);
}

constexpr std::uint64_t device_track_base = 1'000'000'000ull;

}  // namespace

// ---- stage_context -------------------------------------------------------------------------------

stage_context::stage_context(int index, device dev)
    : index_(index), dev_(std::move(dev)), compute_(dev_.create_stream()), copies_(dev_.create_stream()) {}

stream stage_context::compute() const {
  std::lock_guard lock(mu_);
  return compute_;
}
stream stage_context::copies() const {
  std::lock_guard lock(mu_);
  return copies_;
}
std::size_t stage_context::instances() const {
  std::lock_guard lock(mu_);
  return instances_;
}
std::vector<stream> stage_context::retired() const {
  std::lock_guard lock(mu_);
  return retired_;
}
std::vector<stream> stage_context::take_retired() {
  std::lock_guard lock(mu_);
  return std::exchange(retired_, {});
}
void stage_context::set_links(links l) {
  std::lock_guard lock(mu_);
  links_ = std::move(l);
}
stage_context::links stage_context::get_links() const {
  std::lock_guard lock(mu_);
  return links_;
}
void stage_context::set_store(actor_ref store) {
  std::lock_guard lock(mu_);
  links_.store = std::move(store);
}
std::size_t stage_context::claim_instance() {
  std::lock_guard lock(mu_);
  if (instances_++ == 0) return instances_;
  retired_.push_back(std::move(compute_));
  retired_.push_back(std::move(copies_));
  compute_ = dev_.create_stream();
  copies_ = dev_.create_stream();
  return instances_;
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
  const std::string what = "stage " + std::to_string(index()) + " device work failed: " + describe(error);
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
  // Posted from the backend's completion thread without blocking it (as send_on_complete does),
  // tagged with this instance and step so that a restarted instance ignores it.
  on.on_complete([to = self(), msg = std::move(msg), step = step_, instance = instance_](std::exception_ptr failure) mutable {
    strata::detail::envelope* e = nullptr;
    if (!failure || std::is_same_v<T, retired_drained>)
      e = new strata::detail::typed_envelope<T>(std::move(msg));
    else
      e = new strata::detail::typed_envelope<stream_failure>(stream_failure{step, instance, std::move(failure)});
    e->msg_id = strata::detail::next_message_id();
    (void)strata::detail::deliver(to.cell(), e);
  });
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

// ---- step_driver ---------------------------------------------------------------------------------

step_driver::step_driver(std::vector<actor_ref> stages, actor_ref supervisor, update_rule rule, std::vector<int> groups)
    : stages_(std::move(stages)), supervisor_(std::move(supervisor)), rule_(std::move(rule)), groups_(std::move(groups)) {
  if (!groups_.empty() && groups_.size() != stages_.size())
    throw std::invalid_argument("a step driver of " + std::to_string(stages_.size()) + " stages needs as many groups, got " +
                                std::to_string(groups_.size()));
  instance_.assign(stages_.size(), 0);
}

void step_driver::fail_step(error e) {
  if (promise_.pending()) promise_.deliver(std::move(e));
}

void step_driver::on_stage_failed(const stage_failed& f) {
  if (f.step != step_ || !promise_.pending() || blamed_ >= 0) return;
  const auto s = static_cast<std::size_t>(f.stage);
  if (s >= stages_.size()) return;
  failed_[s] = f.inherited_from;
  failure_text_[s] = f.reason;
  if (f.inherited_from < 0) {  // it started here
    blame(f.stage, f.reason);
    return;
  }
  blame_when_all_reported();
}

void step_driver::blame_when_all_reported() {
  // An inherited failure: the stage where it started reports too (its own stream carries the same
  // error), unless every stage has reported without one; then the first inherited report is named.
  if (blamed_ >= 0) return;
  for (std::size_t k = 0; k < stages_.size(); ++k)
    if (failed_[k] == -2 && !computed_ok_[k]) return;
  for (std::size_t k = 0; k < stages_.size(); ++k)
    if (failed_[k] != -2) {
      blame(static_cast<int>(k), failure_text_[k]);
      return;
    }
}

void step_driver::blame(int stage, const std::string& reason) {
  blamed_ = stage;
  blamed_reason_ = reason;
  // One restart per supervisor's group: to the blamed stage in its own group, to the first stage of
  // every other group. Each stage's new instance then says so (stage_started).
  std::vector<int> done;
  auto group_of = [&](std::size_t s) { return groups_.empty() ? 0 : groups_[s]; };
  auto order = [&](std::size_t s) {
    if (std::find(done.begin(), done.end(), group_of(s)) != done.end()) return;
    done.push_back(group_of(s));
    send(stages_[s], restart_stage{"pipeline stage " + std::to_string(stage) + " failed during step " +
                                   std::to_string(step_) + ": " + reason});
  };
  order(static_cast<std::size_t>(stage));
  for (std::size_t s = 0; s < stages_.size(); ++s) order(s);
  need_instance_.resize(stages_.size());
  for (std::size_t s = 0; s < stages_.size(); ++s) need_instance_[s] = instance_[s] + 1;
  answer_once_restarted();
}

void step_driver::on_stage_started(const stage_started& m) {
  const auto s = static_cast<std::size_t>(m.stage);
  if (s >= stages_.size()) return;
  instance_[s] = std::max(instance_[s], m.instance);
  if (!promise_.pending()) return;
  if (blamed_ < 0) {
    // A restart nobody here ordered (an owner's restart_stage after a step that timed out): the
    // step's work died with the old instances; its group restarts whole, so wait for all of them.
    blamed_ = m.stage;
    blamed_reason_ = "stage " + std::to_string(m.stage) + " restarted during the step (its owner asked)";
    need_instance_.resize(stages_.size());
    for (std::size_t k = 0; k < stages_.size(); ++k) need_instance_[k] = k == s ? instance_[k] : instance_[k] + 1;
  }
  answer_once_restarted();
}

void step_driver::answer_once_restarted() {
  for (std::size_t s = 0; s < stages_.size(); ++s)
    if (instance_[s] < need_instance_[s]) return;
  abandoned_ = step_;
  fail_step(blamed_error());
}

error step_driver::blamed_error() const {
  return error(errc::runtime_failure, "pipeline stage " + std::to_string(blamed_) + " failed during step " +
                                          std::to_string(step_) + ": " + blamed_reason_);
}

behavior step_driver::make_behavior() {
  if (supervisor_) monitor(supervisor_);
  if (!groups_.empty())
    for (auto& s : stages_) monitor(s);
  return {
      [this](const run_step&) {
        promise_ = make_response_promise<step_outcome>();
        if (fatal_) {
          promise_.deliver(fatal_);
          return;
        }
        ++step_;
        start_ = std::chrono::steady_clock::now();
        reports_.assign(stages_.size(), {});
        args_.clear();
        computed_ = updated_ = 0;
        failed_.assign(stages_.size(), -2);
        failure_text_.assign(stages_.size(), {});
        computed_ok_.assign(stages_.size(), false);
        blamed_ = -1;
        blamed_reason_.clear();
        need_instance_.clear();
        const std::uint64_t abandoned = std::exchange(abandoned_, 0);
        for (auto& s : stages_) send(s, begin_step{step_, abandoned});
      },
      [this](stage_computed& c) {
        if (c.step != step_ || !promise_.pending()) return;
        computed_ok_.at(static_cast<std::size_t>(c.stage)) = true;
        reports_.at(static_cast<std::size_t>(c.stage)) = std::move(c.report);
        if (blamed_ >= 0) return;
        for (auto f : failed_)
          if (f != -2) {  // a failure is being resolved
            blame_when_all_reported();
            return;
          }
        if (++computed_ < stages_.size()) return;
        if (rule_) args_ = rule_(reports_);
        for (auto& s : stages_) send(s, stage_update{step_, args_});
      },
      [this](const stage_updated& u) {
        if (u.step != step_ || !promise_.pending() || blamed_ >= 0) return;
        if (++updated_ < stages_.size()) return;
        step_outcome out;
        out.step = step_;
        out.reports = std::move(reports_);
        out.args = args_;
        out.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
        promise_.deliver(std::move(out));
      },
      [this](const stage_failed& f) { on_stage_failed(f); },
      [this](const stage_started& s) { on_stage_started(s); },
      [this](const down_msg& d) {
        if (fatal_) return;
        if (supervisor_ && d.source == supervisor_) {
          fatal_ = error(errc::runtime_failure, "the pipeline's stage supervisor failed during step " +
                                                    std::to_string(step_) + ": " + d.reason.message());
        } else {
          auto it = std::find(stages_.begin(), stages_.end(), d.source);
          if (it == stages_.end()) return;
          fatal_ = error(errc::runtime_failure, "pipeline stage " + std::to_string(it - stages_.begin()) +
                                                    " went down during step " + std::to_string(step_) + ": " +
                                                    d.reason.message());
        }
        // A supervisor that gave up on the restarts of a failed step: that step fails with its
        // own cause, every later one with this.
        fail_step(blamed_ >= 0 ? blamed_error() : fatal_);
      },
  };
}

}  // namespace strata::pipeline
