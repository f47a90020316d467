#include "admission.hpp"

#include <algorithm>
#include <utility>

namespace strata::kvstore::internal {

namespace {

template <class T>
std::vector<T> sorted_unique(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

std::vector<const void*> allocations(const std::vector<tensor>& ts) {
  std::vector<const void*> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(allocation_of(t));
  return out;
}
std::vector<const void*> allocations(const std::vector<slice_ref>& ts) {
  std::vector<const void*> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(allocation_of(t.t));
  return out;
}
template <class T>
std::vector<T> joined(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// True when the sorted ranges `a` and `b` have an element in common.
template <class T>
bool share_one(const std::vector<T>& a, const std::vector<T>& b) {
  auto i = a.begin();
  auto j = b.begin();
  while (i != a.end() && j != b.end()) {
    if (*i < *j) ++i;
    else if (*j < *i) ++j;
    else return true;
  }
  return false;
}

}  // namespace

const void* allocation_of(const tensor& t) noexcept { return t.storage().identity(); }

// Init, set_updater, set_optimizer, set_learning_rate, save and load (and their shard forms) are barriers.
admission_ticket ticket_of(const kvstore::init& m) { return {"init", 0, true, m.keys, {}, {}}; }
admission_ticket ticket_of(const kvstore::push& m) {
  return {"push", m.priority, false, m.keys, allocations(m.values), {}};
}
admission_ticket ticket_of(const kvstore::pull& m) { return {"pull", m.priority, false, m.keys, allocations(m.outs), {}}; }
admission_ticket ticket_of(const kvstore::pushpull& m) {
  return {"pushpull", m.priority, false, joined(m.push.keys, m.pull.keys),
          joined(allocations(m.push.values), allocations(m.pull.outs)), {}};
}
admission_ticket ticket_of(const kvstore::pushpull_in_place& m) {
  return {"pushpull", m.priority, false, m.keys, allocations(m.values), {}};
}
admission_ticket ticket_of(const kvstore::broadcast& m) {  // an init: a barrier
  return {"broadcast", 0, true, joined(m.init.keys, m.pull.keys), {}, {}};
}
admission_ticket ticket_of(const kvstore::set_updater&) { return {"set_updater", 0, true, {}, {}, {}}; }
admission_ticket ticket_of(const kvstore::set_optimizer&) { return {"set_optimizer", 0, true, {}, {}, {}}; }
admission_ticket ticket_of(const kvstore::set_gradient_compression&) {
  return {"set_gradient_compression", 0, true, {}, {}, {}};
}
admission_ticket ticket_of(const kvstore::set_learning_rate&) { return {"set_learning_rate", 0, true, {}, {}, {}}; }
admission_ticket ticket_of(const kvstore::version& m) { return {"version", 0, false, {m.key}, {}, {}}; }
admission_ticket ticket_of(const kvstore::save&) { return {"save", 0, true, {}, {}, {}}; }
admission_ticket ticket_of(const kvstore::load&) { return {"load", 0, true, {}, {}, {}}; }
admission_ticket ticket_of(const kvstore::push_row_sparse& m) {
  std::vector<const void*> uses;
  for (const auto& v : m.values) uses.push_back(allocation_of(v.rows));
  return {"push", m.priority, false, m.keys, uses, {}};
}
admission_ticket ticket_of(const kvstore::row_sparse_pull& m) {
  return {"pull", m.priority, false, m.keys, allocations(m.outs), {}};
}
admission_ticket ticket_of(const kvstore::save_optimizer_states&) {
  return {"save_optimizer_states", 0, true, {}, {}, {}};
}
admission_ticket ticket_of(const kvstore::load_optimizer_states&) {
  return {"load_optimizer_states", 0, true, {}, {}, {}};
}
admission_ticket ticket_of(const shard_load_optimizer_states&) { return {"load_optimizer_states", 0, true, {}, {}, {}}; }
admission_ticket ticket_of(const shard_init& m) { return {"init", 0, true, m.keys, {}, {}}; }
admission_ticket ticket_of(const shard_request& m) {
  const char* op = m.push_keys.empty() ? "pull" : (m.pull_keys.empty() ? "push" : "pushpull");
  return {op, m.priority, false, joined(m.push_keys, m.pull_keys), joined(allocations(m.values), allocations(m.outs)),
          m.origin};
}
admission_ticket ticket_of(const shard_row_sparse& m) {
  std::vector<const void*> uses;
  for (const auto* lists : {&m.values, &m.outs})
    for (const auto& list : *lists) uses.push_back(allocation_of(list.data));
  return {m.push_keys.empty() ? "row_sparse_pull" : "push", m.priority, false, joined(m.push_keys, m.pull_keys),
          std::move(uses), m.origin};
}
admission_ticket ticket_of(const shard_save&) { return {"save", 0, true, {}, {}, {}}; }
admission_ticket ticket_of(const shard_load&) { return {"load", 0, true, {}, {}, {}}; }

void admission_queue::admit(std::uint64_t sender, const admission_ticket& ticket, request_run run) {
  queue_.push_back(pending{ticket.priority, next_seq_++, sender, ticket.barrier, sorted_unique(ticket.keys),
                           sorted_unique(ticket.tensors), std::move(run)});
  pump();
}

void admission_queue::finished_one() {
  --in_flight_;
  pump();
}

void admission_queue::fail_all(const error& reason) {
  for (auto& q : queue_) q.run(&reason);
  queue_.clear();
}

/// True when `later` may not be served before `earlier` (both queued, `earlier` first).
bool admission_queue::must_follow(const pending& earlier, const pending& later) {
  if (earlier.barrier || later.barrier) return true;
  if (share_one(earlier.tensors, later.tensors)) return true;  // any senders: one tensor, issue order
  return earlier.sender == later.sender && share_one(earlier.keys, later.keys);
}

std::size_t admission_queue::next_index() const {
  std::size_t best = 0;
  for (std::size_t i = 1; i < queue_.size(); ++i)
    if (queue_[i].priority > queue_[best].priority) best = i;
  for (;;) {
    std::size_t blocker = best;
    for (std::size_t j = 0; j < best; ++j)
      if (must_follow(queue_[j], queue_[best])) {
        blocker = j;
        break;
      }
    if (blocker == best) return best;
    best = blocker;
  }
}

/// Hands requests to the stream while fewer than `max_in_flight` are running there.
void admission_queue::pump() {
  while (in_flight_ < max_in_flight_ && !queue_.empty()) {
    const std::size_t i = next_index();
    pending next = std::move(queue_[i]);
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
    ++in_flight_;
    next.run(nullptr);
    started_();
  }
}

}  // namespace strata::kvstore::internal
