#include "strata/device/device.hpp"

#include <string>

#include "device/impl.hpp"
#include "strata/device/error.hpp"

namespace strata {
namespace device_detail {

allocation::~allocation() {
  std::vector<std::shared_ptr<stream_impl>> streams{stream};
  {
    std::lock_guard lk(mu);
    for (auto& w : uses)
      if (auto s = w.lock(); s && s != stream) streams.push_back(std::move(s));
  }
  stream->device->release(ptr, bytes, capacity, std::move(streams));
}

void device_impl::set_observer(work_observer o) {
  std::shared_ptr<const work_observer> p;
  if (o) p = std::make_shared<const work_observer>(std::move(o));
  std::lock_guard lk(observer_mu_);
  observer_ = std::move(p);
  observed_.store(observer_ != nullptr, std::memory_order_relaxed);
}

void device_impl::notify(const work_record& r) const {
  std::shared_ptr<const work_observer> o;
  {
    std::lock_guard lk(observer_mu_);
    o = observer_;
  }
  if (!o) return;
  try {
    (*o)(r);
  } catch (...) {
    // Observers must not throw (work.hpp). One that does loses this record, as on every backend,
    // instead of taking the arena or sim clock thread down with it.
  }
}

void after_all(const std::vector<std::shared_ptr<stream_impl>>& streams, std::function<void()> done) {
  if (streams.empty()) {
    done();
    return;
  }
  struct countdown {
    std::atomic<std::size_t> left;
    std::function<void()> done;
  };
  auto c = std::make_shared<countdown>();
  c->left.store(streams.size());
  c->done = std::move(done);
  for (auto& s : streams)
    s->on_complete([c](std::exception_ptr) {
      if (c->left.fetch_sub(1, std::memory_order_acq_rel) == 1) c->done();
    });
}

void pool_counters::on_allocate(std::size_t n, bool hit) noexcept {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (hit) cache_hits.fetch_add(1, std::memory_order_relaxed);
  auto now = in_use.fetch_add(n, std::memory_order_relaxed) + n;
  auto p = peak.load(std::memory_order_relaxed);
  while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

}  // namespace device_detail

namespace {
device_detail::device_impl& checked(const std::shared_ptr<device_detail::device_impl>& d) {
  if (!d) device_detail::throw_invalid("strata::device: this device handle is empty (default-constructed)");
  return *d;
}
const device_properties& empty_properties() {
  static const device_properties p{};
  return p;
}
}  // namespace

device_kind device::kind() const noexcept { return properties().kind; }
int device::index() const noexcept { return properties().index; }
const std::string& device::name() const noexcept { return properties().name; }
const device_properties& device::properties() const noexcept { return impl_ ? impl_->props : empty_properties(); }

stream device::create_stream(stream_priority priority) { return stream(checked(impl_).create_stream(priority)); }

event device::create_event(bool timing) { return event(checked(impl_).create_event(timing)); }

buffer device::allocate(std::size_t bytes, const stream& s) {
  auto& d = checked(impl_);
  if (!s.impl() || s.impl()->device != impl_)
    device_detail::throw_invalid("device::allocate on " + d.props.name +
                                 ": the stream must be one of this device's streams");
  return buffer(d.allocate(bytes, s.impl()));
}

void device::copy(const buffer& dst, const buffer& src, const stream& s, std::size_t bytes) {
  auto& d = checked(impl_);
  if (!s.impl() || s.impl()->device != impl_)
    device_detail::throw_invalid("device::copy on " + d.props.name + ": the stream must be one of this device's streams");
  stream(s).copy(dst, src, bytes);
}

memory_stats device::memory() const { return checked(impl_).memory(); }
void device::trim_memory() { checked(impl_).trim(); }
void device::set_work_observer(work_observer observer) { checked(impl_).set_observer(std::move(observer)); }

// ---- buffer -------------------------------------------------------------------------------------

void* buffer::data() const noexcept { return impl_ ? impl_->ptr : nullptr; }
std::size_t buffer::size() const noexcept { return impl_ ? impl_->bytes : 0; }
device_kind buffer::kind() const noexcept { return impl_ ? impl_->stream->device->props.kind : device_kind::cpu; }
bool buffer::host_accessible() const noexcept { return impl_ && kind() == device_kind::cpu; }

device buffer::get_device() const {
  if (!impl_) device_detail::throw_invalid("strata::buffer: this buffer handle is empty");
  return device(impl_->stream->device);
}

void buffer::record_stream(const stream& s) const {
  if (!impl_ || !s.impl()) return;
  if (s.impl() == impl_->stream) return;
  std::lock_guard lk(impl_->mu);
  for (auto& w : impl_->uses)
    if (w.lock() == s.impl()) return;
  impl_->uses.push_back(s.impl());
}

}  // namespace strata
