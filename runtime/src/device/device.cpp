#include "strata/device/device.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "device/impl.hpp"
#include "strata/device/error.hpp"
#include "strata/extension/transport.hpp"

namespace strata {
namespace detail {

allocation::~allocation() {
  std::vector<std::shared_ptr<stream_impl>> streams{stream};
  {
    std::lock_guard lk(mu);
    for (auto& w : uses)
      if (auto s = w.lock(); s && s != stream) streams.push_back(std::move(s));
  }
  stream->device->release(ptr, bytes, capacity, std::move(streams));
}

namespace {
/// The observer calls in progress on this thread, innermost first (an observer may cause another
/// observed item to complete on its own thread: a cpu arena thread that waits runs other work).
struct observer_frame {
  const void* entry;
  const observer_frame* outer;
};
thread_local const observer_frame* current_observer_calls = nullptr;
}  // namespace

void device_impl::observer_entry::call(const work_record& r) const {
  running.fetch_add(1);
  if (!removed.load()) {
    const observer_frame frame{this, current_observer_calls};
    current_observer_calls = &frame;
    try {
      fn(r);
    } catch (...) {
      // Observers must not throw (work.hpp). One that does loses this record, as on every backend,
      // instead of taking the arena or sim clock thread (or the other observers' record) with it.
    }
    current_observer_calls = frame.outer;
  }
  if (running.fetch_sub(1) == 1 && removed.load()) running.notify_all();
}

void device_impl::observer_entry::retire() noexcept {
  removed.store(true);
  int own = 0;  // calls of this observer on this thread (it removes itself): not waited for
  for (auto f = current_observer_calls; f; f = f->outer) own += f->entry == this ? 1 : 0;
  for (int n = running.load(); n > own; n = running.load()) running.wait(n);
}

void device_impl::publish(observer_list list) {
  observed_.store(!list.empty(), std::memory_order_relaxed);
  observers_ = std::make_shared<const observer_list>(std::move(list));
}

std::uint64_t device_impl::add_observer(work_observer o) {
  auto e = std::make_shared<observer_entry>();
  e->fn = std::move(o);
  std::lock_guard lk(observer_mu_);
  e->id = next_observer_id_++;
  observer_list list = *observers_;
  list.push_back(e);
  publish(std::move(list));
  return e->id;
}

void device_impl::remove_observer(std::uint64_t id) noexcept {
  std::shared_ptr<observer_entry> gone;
  {
    std::lock_guard lk(observer_mu_);
    observer_list list = *observers_;
    auto it = std::find_if(list.begin(), list.end(), [id](const auto& e) { return e->id == id; });
    if (it == list.end()) return;
    gone = std::move(*it);
    list.erase(it);
    publish(std::move(list));
  }
  gone->retire();  // outside the lock: the observer may be adding or removing observers itself
}

void device_impl::set_observer(work_observer o) {
  std::shared_ptr<observer_entry> fresh;
  if (o) {
    fresh = std::make_shared<observer_entry>();
    fresh->fn = std::move(o);  // id 0: the set slot
  }
  std::shared_ptr<observer_entry> gone;
  {
    std::lock_guard lk(observer_mu_);
    observer_list list = *observers_;
    if (!list.empty() && list.front()->id == 0) {
      gone = std::move(list.front());
      list.erase(list.begin());
    }
    if (fresh) list.insert(list.begin(), std::move(fresh));
    publish(std::move(list));
  }
  if (gone) gone->retire();
}

void device_impl::notify(const work_record& r) const {
  std::shared_ptr<const observer_list> list;
  {
    std::lock_guard lk(observer_mu_);
    list = observers_;
  }
  for (const auto& e : *list) e->call(r);
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

#if !STRATA_HAS_CUDA
// The CUDA build defines it in cuda_backend.cpp.
std::shared_ptr<std::byte> pinned_host_memory(const device&, std::size_t) {
  throw_invalid("pinned staging needs a cuda device (this runtime was built without CUDA)");
}
#endif

}  // namespace detail

namespace {
detail::device_impl& checked(const std::shared_ptr<detail::device_impl>& d) {
  if (!d) detail::throw_invalid("strata::device: this device handle is empty (default-constructed)");
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

stream device::create_stream(stream_priority priority) { return detail::handle_of(checked(impl_).create_stream(priority)); }

event device::create_event(bool timing) { return detail::handle_of(checked(impl_).create_event(timing)); }

buffer device::allocate(std::size_t bytes, const stream& s) {
  auto& d = checked(impl_);
  if (!detail::impl_of(s) || detail::impl_of(s)->device != impl_)
    detail::throw_invalid("device::allocate on " + d.props.name +
                          ": the stream must be one of this device's streams");
  return detail::handle_of(d.allocate(bytes, detail::impl_of(s)));
}

void device::copy(const buffer& dst, const buffer& src, const stream& s, std::size_t bytes) {
  auto& d = checked(impl_);
  if (!detail::impl_of(s) || detail::impl_of(s)->device != impl_)
    detail::throw_invalid("device::copy on " + d.props.name + ": the stream must be one of this device's streams");
  stream(s).copy(dst, src, bytes);
}

bool device::can_read_in_place(const buffer& memory) const {
  const device_kind k = memory.kind();
  if (k != kind()) return false;
  if (k != device_kind::cuda) return true;  // host memory, or sim (no data)
  return memory.get_device().properties().gpu_ordinal == properties().gpu_ordinal;
}

memory_stats device::memory() const { return checked(impl_).memory(); }
void device::trim_memory() { checked(impl_).trim(); }
void device::set_work_observer(work_observer observer) { checked(impl_).set_observer(std::move(observer)); }

work_observer_handle device::add_work_observer(work_observer observer) {
  auto& d = checked(impl_);
  if (!observer) detail::throw_invalid("device::add_work_observer on " + d.props.name + ": the observer is empty");
  return work_observer_handle(impl_, d.add_observer(std::move(observer)));
}

// ---- work_observer_handle -----------------------------------------------------------------------

work_observer_handle::work_observer_handle(work_observer_handle&& other) noexcept
    : device_(std::move(other.device_)), id_(std::exchange(other.id_, 0)) {}

work_observer_handle& work_observer_handle::operator=(work_observer_handle&& other) noexcept {
  if (this != &other) {
    remove();
    device_ = std::move(other.device_);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

work_observer_handle::~work_observer_handle() { remove(); }

void work_observer_handle::remove() noexcept {
  if (id_ == 0) return;
  if (auto d = device_.lock()) d->remove_observer(id_);
  device_.reset();
  id_ = 0;
}

// ---- buffer -------------------------------------------------------------------------------------

void* buffer::data() const noexcept { return impl_ ? impl_->ptr : nullptr; }
std::size_t buffer::size() const noexcept { return impl_ ? impl_->bytes : 0; }
device_kind buffer::kind() const noexcept { return impl_ ? impl_->stream->device->props.kind : device_kind::cpu; }
bool buffer::host_accessible() const noexcept { return impl_ && kind() == device_kind::cpu; }

device buffer::get_device() const {
  if (!impl_) detail::throw_invalid("strata::buffer: this buffer handle is empty");
  return detail::handle_of(impl_->stream->device);
}

void buffer::record_stream(const stream& s) const {
  if (!impl_ || !detail::impl_of(s)) return;
  if (detail::impl_of(s) == impl_->stream) return;
  std::lock_guard lk(impl_->mu);
  for (auto& w : impl_->uses)
    if (w.lock() == detail::impl_of(s)) return;
  impl_->uses.push_back(detail::impl_of(s));
}

}  // namespace strata
