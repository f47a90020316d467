#include "strata/pipeline/step_driver.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "strata/actor_system.hpp"

namespace strata::pipeline {

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
