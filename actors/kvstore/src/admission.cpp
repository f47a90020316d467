#include "admission.hpp"

#include <algorithm>
#include <utility>

namespace strata::kvstore::internal {

namespace {

std::vector<kvstore::key> joined(std::vector<kvstore::key> a, const std::vector<kvstore::key>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool share_a_key(const std::vector<kvstore::key>& a, const std::vector<kvstore::key>& b) {
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

// Init, set_updater, set_optimizer, save and load (and their shard forms) are barriers.
admission_ticket ticket_of(const kvstore::init& m) { return {"init", 0, true, m.keys, {}}; }
admission_ticket ticket_of(const kvstore::push& m) { return {"push", m.priority, false, m.keys, {}}; }
admission_ticket ticket_of(const kvstore::pull& m) { return {"pull", m.priority, false, m.keys, {}}; }
admission_ticket ticket_of(const kvstore::pushpull& m) {
  return {"pushpull", m.priority, false, joined(m.push.keys, m.pull.keys), {}};
}
admission_ticket ticket_of(const kvstore::set_updater&) { return {"set_updater", 0, true, {}, {}}; }
admission_ticket ticket_of(const kvstore::set_optimizer&) { return {"set_optimizer", 0, true, {}, {}}; }
admission_ticket ticket_of(const kvstore::version& m) { return {"version", 0, false, {m.key}, {}}; }
admission_ticket ticket_of(const kvstore::save&) { return {"save", 0, true, {}, {}}; }
admission_ticket ticket_of(const kvstore::load&) { return {"load", 0, true, {}, {}}; }
admission_ticket ticket_of(const shard_init& m) { return {"init", 0, true, m.keys, {}}; }
admission_ticket ticket_of(const shard_request& m) {
  const char* op = m.push_keys.empty() ? "pull" : (m.pull_keys.empty() ? "push" : "pushpull");
  return {op, m.priority, false, joined(m.push_keys, m.pull_keys), m.origin};
}
admission_ticket ticket_of(const shard_save&) { return {"save", 0, true, {}, {}}; }
admission_ticket ticket_of(const shard_load&) { return {"load", 0, true, {}, {}}; }

void admission_queue::admit(std::uint64_t sender, const admission_ticket& ticket, request_run run) {
  auto keys = ticket.keys;
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  queue_.push_back(pending{ticket.priority, next_seq_++, sender, ticket.barrier, std::move(keys), std::move(run)});
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
  return earlier.sender == later.sender && share_a_key(earlier.keys, later.keys);
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
