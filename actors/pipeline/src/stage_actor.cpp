#include "strata/pipeline/stage_actor.hpp"

#include <algorithm>
#include <stdexcept>

#include "strata/device_messages.hpp"
#include "strata/trace.hpp"

namespace strata::pipeline {

namespace {

/// The stage's stream has completed its computes of `step` (then the report is read).
struct computes_complete {
  std::uint64_t step;
};
/// The stage's stream has completed the update of `step`.
struct update_complete {
  std::uint64_t step;
};

/// A failure already reported to the driver (guarded() does not report it again).
class reported_failure : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

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
void stage_context::claim_instance() {
  std::lock_guard lock(mu_);
  if (instances_++ == 0) return;
  retired_.push_back(std::move(compute_));
  retired_.push_back(std::move(copies_));
  compute_ = dev_.create_stream();
  copies_ = dev_.create_stream();
}

// ---- basic_stage_actor ---------------------------------------------------------------------------

basic_stage_actor::basic_stage_actor(std::shared_ptr<stage_context> context) : context_(std::move(context)) {
  context_->claim_instance();
  compute_ = context_->compute();
}

behavior basic_stage_actor::make_behavior() {
  if (trace::enabled())
    trace::emit(trace::event_kind::tag, id(), 0, trace::intern("pipeline.stage"), 0, static_cast<std::uint32_t>(index()));
  return {
      [this](const begin_step& b) {
        guarded([&] {
          links_ = context_->get_links();
          if (!wired_) {
            transport_ = transport(context_->get_device(), compute_, context_->copies(), links_.copy_always);
            wired_ = true;
          }
          step_ = b.step;
          std::erase_if(activations_, [&](const auto& kv) { return kv.first.first < step_; });
          std::erase_if(gradients_, [&](const auto& kv) { return kv.first.first < step_; });
          pos_ = 0;
          update_done_ = false;
          phase_ = phase::running;
          model_begin_step(step_);
          advance();
        });
      },
      [this](stage_activation& m) {
        activations_[{m.t.step, unit(m.t.micro_batch, m.t.chunk)}] = std::move(m.t.data);
        guarded([&] { advance(); });
      },
      [this](stage_gradient& m) {
        gradients_[{m.t.step, unit(m.t.micro_batch, m.t.chunk)}] = std::move(m.t.data);
        guarded([&] { advance(); });
      },
      [this](const computes_complete& c) {
        if (c.step != step_ || phase_ != phase::awaiting_compute) return;
        phase_ = phase::awaiting_update;
        std::vector<double> report;
        guarded([&] { report = model_report(); });
        send(links_.driver, stage_computed{index(), step_, std::move(report)});
      },
      [this](const stage_update& u) {
        if (u.step != step_ || phase_ != phase::awaiting_update) return;
        phase_ = phase::running;
        ++pos_;  // past push_gradients: the update pushes now
        guarded([&] {
          model_update(u.args);
          advance();
        });
      },
      [this](const update_complete& u) {
        if (u.step != step_ || phase_ != phase::finishing) return;
        phase_ = phase::idle;
        send(links_.driver, stage_updated{index(), step_});
      },
      [this](const device_failure& f) { fail("stage " + std::to_string(index()) + " device work failed: " + f.what); },
      [this](const restart_stage&) -> void {
        throw reported_failure("stage " + std::to_string(index()) + " restarts on its owner's request");
      },
      [this](stage_task& t) -> expected<void> { return t.run(compute_); },
  };
}

void basic_stage_actor::guarded(const std::function<void()>& f) {
  try {
    f();
  } catch (const reported_failure&) {
    throw;
  } catch (const std::exception& e) {
    report_failure(e.what());
    throw;
  }
}

void basic_stage_actor::update_finished() {
  update_done_ = true;
  advance();
}

void basic_stage_actor::report_failure(const std::string& what) {
  const actor_ref driver = wired_ ? links_.driver : context_->get_links().driver;
  if (driver) send(driver, stage_failed{index(), step_, what});
}

void basic_stage_actor::fail(const std::string& what) {
  report_failure(what);
  throw reported_failure(what);
}

std::size_t basic_stage_actor::unit(int mb, int ch) const noexcept {
  return static_cast<std::size_t>(mb) * links_.chunks + static_cast<std::size_t>(ch);
}

void basic_stage_actor::send_output(const action& a, tensor t, bool forward) {
  const actor_ref& to = forward ? links_.next : links_.prev;
  if (!to)
    fail("stage " + std::to_string(index()) + "'s plan sends (" + pipeline::to_string(a) + ") to a stage it does not have");
  t.set_ready_event(compute_.record());
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
        tensor t = transport_.receive(it->second, 2 * it->first.second);
        activations_.erase(it);
        model_accept_input(mb, ch, t);
        break;
      }
      case action_kind::forward:
        model_forward(mb, ch);
        break;
      case action_kind::send_activation:
        send_output(a, model_output(mb, ch), true);
        break;
      case action_kind::recv_gradient: {
        auto it = gradients_.find({step_, unit(a.micro_batch, a.chunk)});
        if (it == gradients_.end()) return;
        tensor t = transport_.receive(it->second, 2 * it->first.second + 1);
        gradients_.erase(it);
        model_accept_output_grad(mb, ch, t);
        break;
      }
      case action_kind::backward:
        model_backward(mb, ch);
        break;
      case action_kind::send_gradient:
        send_output(a, model_input_grad(mb, ch), false);
        break;
      case action_kind::push_gradients:
        // The driver needs every stage's report before anyone pushes (a global norm, a loss).
        model_end_compute();
        send_on_complete(compute_, self(), computes_complete{step_});
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
    send_on_complete(compute_, self(), update_complete{step_});
  }
}

// ---- step_driver ---------------------------------------------------------------------------------

step_driver::step_driver(std::vector<actor_ref> stages, actor_ref supervisor, update_rule rule, std::vector<int> groups)
    : stages_(std::move(stages)), supervisor_(std::move(supervisor)), rule_(std::move(rule)), groups_(std::move(groups)) {
  if (!groups_.empty() && groups_.size() != stages_.size())
    throw std::invalid_argument("a step driver of " + std::to_string(stages_.size()) + " stages needs as many groups, got " +
                                std::to_string(groups_.size()));
}

void step_driver::fail_step(error e) {
  if (promise_.pending()) promise_.deliver(std::move(e));
}

void step_driver::restart_other_groups(int failed_stage) {
  if (groups_.empty() || failed_stage < 0 || static_cast<std::size_t>(failed_stage) >= groups_.size()) return;
  // The failed stage's own supervisor restarts its group; one restart_stage per other group
  // makes that group's all-for-one supervisor restart the rest.
  auto done = [&](int g) { return std::find(restarted_groups_.begin(), restarted_groups_.end(), g) != restarted_groups_.end(); };
  if (!done(groups_[static_cast<std::size_t>(failed_stage)])) restarted_groups_.push_back(groups_[static_cast<std::size_t>(failed_stage)]);
  for (std::size_t s = 0; s < stages_.size(); ++s) {
    if (done(groups_[s])) continue;
    restarted_groups_.push_back(groups_[s]);
    send(stages_[s], restart_stage{});
  }
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
        restarted_groups_.clear();
        args_.clear();
        computed_ = updated_ = 0;
        for (auto& s : stages_) send(s, begin_step{step_});
      },
      [this](stage_computed& c) {
        if (c.step != step_ || !promise_.pending()) return;
        reports_.at(static_cast<std::size_t>(c.stage)) = std::move(c.report);
        if (++computed_ < stages_.size()) return;
        if (rule_) args_ = rule_(reports_);
        for (auto& s : stages_) send(s, stage_update{step_, args_});
      },
      [this](const stage_updated& u) {
        if (u.step != step_ || !promise_.pending()) return;
        if (++updated_ < stages_.size()) return;
        step_outcome out;
        out.step = step_;
        out.reports = std::move(reports_);
        out.args = args_;
        out.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
        promise_.deliver(std::move(out));
      },
      [this](const stage_failed& f) {
        if (f.step != step_) return;
        restart_other_groups(f.stage);
        fail_step(error(errc::runtime_failure, "pipeline stage " + std::to_string(f.stage) + " failed during step " +
                                                   std::to_string(step_) + ": " + f.reason));
      },
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
        fail_step(fatal_);
      },
  };
}

}  // namespace strata::pipeline
