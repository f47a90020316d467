#include "strata/pipeline/stage_context.hpp"

#include <utility>

namespace strata::pipeline {

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

}  // namespace strata::pipeline
