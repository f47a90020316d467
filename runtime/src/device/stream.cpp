#include "strata/device/stream.hpp"

#include <atomic>
#include <string>

#include "device/impl.hpp"
#include "strata/device/device.hpp"
#include "strata/device/error.hpp"

namespace strata {
namespace detail {

namespace {
std::atomic<std::uint64_t> next_stream_id{1};
}

stream_impl::stream_impl(std::shared_ptr<device_impl> dev, stream_priority p)
    : device(std::move(dev)), priority(p), id(next_stream_id.fetch_add(1, std::memory_order_relaxed)) {}

stream_impl::~stream_impl() = default;

void stream_impl::record(event_impl& e) {
  if (e.kind != device->props.kind)
    throw_invalid("stream::record: an event of a " + std::string(to_string(e.kind)) +
                  " device cannot be recorded on a stream of " + device->props.name +
                  "; create the event on a device of the same backend");
  auto p = std::make_shared<event_point>();
  record_point(p);
  e.set_current(std::move(p));
}

void stream_impl::synchronize() {
  auto p = std::make_shared<event_point>();
  record_point(p);
  p->wait();
  if (auto e = error()) std::rethrow_exception(e);
}

}  // namespace detail

namespace {
detail::stream_impl& checked(const std::shared_ptr<detail::stream_impl>& s) {
  if (!s) detail::throw_invalid("strata::stream: this stream handle is empty (default-constructed)");
  return *s;
}
const std::shared_ptr<detail::allocation>& checked(const buffer& b, const char* what) {
  if (!b) detail::throw_invalid(std::string("stream copy: the ") + what + " buffer is empty");
  return detail::impl_of(b);
}
}  // namespace

device stream::get_device() const { return detail::handle_of(checked(impl_).device); }
std::uint64_t stream::id() const noexcept { return impl_ ? impl_->id : 0; }
stream_priority stream::priority() const noexcept { return impl_ ? impl_->priority : stream_priority::normal; }

void stream::launch(kernel_work work) { checked(impl_).launch(std::move(work)); }

void stream::copy(const buffer& dst, const buffer& src, std::size_t bytes) {
  auto& d = checked(dst, "destination");
  auto& s = checked(src, "source");
  if (bytes == SIZE_MAX) bytes = s->bytes;
  if (bytes > s->bytes || bytes > d->bytes)
    detail::throw_invalid("stream::copy: " + std::to_string(bytes) + " bytes do not fit (source has " +
                          std::to_string(s->bytes) + ", destination " + std::to_string(d->bytes) + ")");
  if (bytes == 0) return;
  checked(impl_).copy(d, s, bytes);
}

void stream::copy_from_host(const buffer& dst, const void* src, std::size_t bytes) {
  auto& d = checked(dst, "destination");
  if (bytes > d->bytes)
    detail::throw_invalid("stream::copy_from_host: " + std::to_string(bytes) +
                          " bytes do not fit the destination of " + std::to_string(d->bytes));
  if (bytes == 0) return;
  if (!src) detail::throw_invalid("stream::copy_from_host: the host source pointer is null");
  checked(impl_).copy_from_host(d, src, bytes);
}

void stream::copy_to_host(void* dst, const buffer& src, std::size_t bytes) {
  auto& s = checked(src, "source");
  if (bytes > s->bytes)
    detail::throw_invalid("stream::copy_to_host: " + std::to_string(bytes) +
                          " bytes exceed the source's " + std::to_string(s->bytes));
  if (bytes == 0) return;
  if (!dst) detail::throw_invalid("stream::copy_to_host: the host destination pointer is null");
  checked(impl_).copy_to_host(dst, s, bytes);
}

void stream::record(const event& e) {
  if (!detail::impl_of(e)) detail::throw_invalid("stream::record: the event handle is empty; use device::create_event()");
  checked(impl_).record(*detail::impl_of(e));
}

event stream::record() {
  auto& s = checked(impl_);
  auto e = s.device->create_event(false);
  s.record(*e);
  return detail::handle_of(std::move(e));
}

void stream::wait(const event& e) {
  auto& s = checked(impl_);
  if (!detail::impl_of(e)) return;
  auto p = detail::impl_of(e)->current();
  if (!p) return;  // never recorded: complete
  s.wait(std::move(p));
}

void stream::on_complete(completion_callback callback) {
  if (!callback) detail::throw_invalid("stream::on_complete: the callback is empty");
  checked(impl_).on_complete(std::move(callback));
}

void stream::synchronize() { checked(impl_).synchronize(); }
std::exception_ptr stream::error() const { return impl_ ? impl_->error() : nullptr; }
void* stream::native_handle() const noexcept { return impl_ ? impl_->native() : nullptr; }

}  // namespace strata
