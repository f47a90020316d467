// Requests made by an actor: pending entries, timeouts, responses.

#include "strata/actor.hpp"

#include <chrono>
#include <functional>
#include <vector>
#include <string>
#include <utility>

#include "cell.hpp"
#include "system_impl.hpp"
#include "strata/trace.hpp"

namespace strata {

using detail::message_kind;
using trace::event_kind;

std::uint64_t actor::register_request(const type_meta* type, std::chrono::nanoseconds timeout) {
  std::uint64_t id = ++next_request_id_;
  detail::pending_request entry;
  entry.type = type;
  if (timeout != std::chrono::nanoseconds::max()) {
    entry.timer = detail::schedule_timer(sys_, timeout, std::chrono::nanoseconds{0}, [to = self(), id] {
      auto* e = new detail::typed_envelope<unit_t>();
      e->kind = message_kind::request_timeout;
      e->request_id = id;
      e->urgent = true;
      e->msg_id = detail::next_message_id();
      (void)detail::deliver(to.cell(), e);
    });
  }
  pending_.emplace(id, std::move(entry));
  return id;
}

void actor::set_request_callbacks(std::uint64_t id, std::function<void(void*)> on_value,
                                  std::function<void(const error&)> on_error) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  it->second.on_value = std::move(on_value);
  it->second.on_error = std::move(on_error);
}

void actor::send_response(detail::envelope& request, detail::envelope* response) noexcept {
  response->request_id = request.request_id;
  response->sender = self();
  response->msg_id = detail::next_message_id();
  (void)detail::deliver(request.sender.cell(), response);
}

void actor::call_error(detail::pending_request& entry, const error& err) {
  if (entry.on_error) {
    entry.on_error(err);
    return;
  }
  throw error_exception(err);  // no error callback: the requester fails with this error
}

void actor::handle_response(detail::envelope& e) {
  auto it = pending_.find(e.request_id);
  if (it == pending_.end()) {
    sys_->late_responses.fetch_add(1, std::memory_order_relaxed);
    trace::emit(event_kind::drop, cell_->id, e.sender.id(), e.msg_id, e.type ? e.type->id : 0,
                static_cast<std::uint32_t>(errc::request_timeout));
    return;
  }
  detail::pending_request entry = std::move(it->second);
  pending_.erase(it);
  if (!awaited_.empty()) std::erase(awaited_, e.request_id);
  detail::cancel_timer(entry.timer);
  if (e.kind == message_kind::error_response) {
    call_error(entry, *static_cast<error*>(e.payload()));
  } else if (e.type != entry.type) {
    call_error(entry, error(errc::type_mismatch, "a request expected a response of type " + entry.type->name +
                                                     " but received " + (e.type ? e.type->name : std::string("?"))));
  } else if (entry.on_value) {
    entry.on_value(e.payload());
  }
}

void actor::handle_timeout(std::uint64_t request_id) {
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return;  // answered meanwhile
  detail::pending_request entry = std::move(it->second);
  pending_.erase(it);
  if (!awaited_.empty()) std::erase(awaited_, request_id);
  call_error(entry, error(errc::request_timeout, "request #" + std::to_string(request_id) + " of actor " +
                                                     describe(cell_) + " timed out without a response"));
}

void detail::reply_unit(actor& self, envelope& request) {
  if (self.current_stashed_) return;  // answered when the stash re-delivers it
  if (request.request_id == 0 || !request.sender) return;
  if (self.promise_taken_) {
    self.promise_taken_ = false;
    return;
  }
  auto* e = new typed_envelope<unit_t>();
  e->kind = message_kind::response;
  self.send_response(request, e);
}

// ---- fan-out (select_all / select_any) -----------------------------------------------------------

void actor::start_select(detail::select_state_base& st, const std::vector<actor_ref>& targets,
                         std::chrono::nanoseconds timeout, const type_meta* response,
                         const std::function<detail::envelope*()>& make_request, const char* what) {
  st.what = what;
  // One entry carries the select's timeout; the requests themselves arm no timer.
  st.timer_id = register_request(type_of<unit_t>(), timeout);
  st.ids.reserve(targets.size());
  st.target_ids.reserve(targets.size());
  for (const actor_ref& target : targets) {
    const std::uint64_t id = register_request(response, no_timeout);
    st.ids.push_back(id);
    st.target_ids.push_back(target.id());
    detail::envelope* e = make_request();
    e->request_id = id;
    (void)detail::deliver(target.cell(), e);  // failures come back as an error response
  }
  st.outstanding = targets.size();
  if (targets.empty()) {
    // Refused, but through the continuation like every other error (it is not set yet).
    auto* e = new detail::typed_envelope<error>(
        error(errc::invalid_argument, std::string(what) + " needs at least one target; it was given none"));
    e->kind = message_kind::error_response;
    e->request_id = st.timer_id;
    e->urgent = true;
    e->sender = self();
    e->msg_id = detail::next_message_id();
    (void)detail::deliver(cell_, e);
  }
}

void actor::finish_select(detail::select_state_base& st) noexcept {
  st.done = true;
  // Requests still open are forgotten: their responses count as late.
  for (std::uint64_t id : st.ids) {
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;
    detail::cancel_timer(it->second.timer);
    pending_.erase(it);
  }
  auto it = pending_.find(st.timer_id);
  if (it != pending_.end()) {
    detail::cancel_timer(it->second.timer);
    pending_.erase(it);
  }
}

}  // namespace strata
