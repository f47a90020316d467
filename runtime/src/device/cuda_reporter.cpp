#include "device/cuda_reporter.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace strata::cuda_backend {

namespace {

std::chrono::nanoseconds from_ms(float ms) {
  return std::chrono::nanoseconds(std::llround(static_cast<double>(ms) * 1e6));
}

/// Measures a new anchor: a record on the idle clock stream, bracketed by steady-clock reads; the
/// tightest of three brackets wins. A recent `previous` anchor is carried forward on the GPU clock
/// and moved a quarter of the way to the new measurement: bracket noise averages out and slow drift
/// between the clocks (NTP slews steady_clock) is followed without visible jumps. Call with the GPU
/// current.
std::shared_ptr<const clock_anchor> measure_anchor(const std::shared_ptr<gpu_state>& g, const clock_anchor* previous) {
  std::lock_guard lk(g->clock_mu);
  cudaStream_t s = g->clock_stream();
  pooled_event best(g, event_use::timing), trial(g, event_use::timing);
  auto width = steady::duration::max();
  steady::time_point middle{};
  for (int i = 0; i < 3; ++i) {
    auto before = steady::now();
    check(cudaEventRecord(trial.get(), s), "cudaEventRecord");
    check(cudaEventSynchronize(trial.get()), "cudaEventSynchronize");
    auto after = steady::now();
    if (after - before < width) {
      width = after - before;
      middle = before + width / 2;
      std::swap(best, trial);
    }
  }
  auto a = std::make_shared<clock_anchor>();
  a->at = std::chrono::duration_cast<std::chrono::nanoseconds>(middle.time_since_epoch());
  a->taken = steady::now();
  float ms = 0;
  if (previous && a->taken - previous->taken < std::chrono::seconds(10)) {
    if (cudaEventElapsedTime(&ms, previous->event.get(), best.get()) == cudaSuccess) {
      auto carried = previous->at + from_ms(ms);
      auto off = a->at - carried;
      if (std::chrono::abs(off) < std::chrono::milliseconds(1)) a->at = carried + off / 4;
    } else {
      cudaGetLastError();
    }
  }
  a->event = std::move(best);
  return a;
}

}  // namespace

work_reporter::~work_reporter() {
  std::unique_lock lk(core_->mu);
  core_->stop = true;
  core_->work.notify_all();
  // The device goes after this returns: the thread must not be inside the observer. (On the
  // thread itself, the observer is what dropped the device; it checks `stop` when it returns.)
  if (core_->thread != std::this_thread::get_id()) core_->progress.wait(lk, [&] { return !core_->notifying; });
  core_->queue.clear();
}

std::optional<work_reporter::span> work_reporter::begin(cudaStream_t s) noexcept {
  try {
    span t{pooled_event(core_->gpu, event_use::timing), pooled_event(core_->gpu, event_use::reporting), anchor()};
    check(cudaEventRecord(t.start.get(), s), "cudaEventRecord");
    return t;
  } catch (...) {
    cudaGetLastError();  // not the launch's error
    return std::nullopt;
  }
}

std::uint64_t work_reporter::finish(span t, cudaStream_t s, std::uint64_t stream_id, const std::string& name, work_kind kind,
                     double flops, double bytes) noexcept {
  auto& c = *core_;
  std::uint64_t seq = 0;
  try {
    check(cudaEventRecord(t.end.get(), s), "cudaEventRecord");
    std::lock_guard lk(c.mu);
    if (c.stop) return 0;
    if (c.thread == std::thread::id{}) {
      std::thread th([k = core_] { run(k); });
      c.thread = th.get_id();
      th.detach();
    }
    seq = c.issued + 1;
    c.queue.push_back(item{std::move(t), name, stream_id, kind, flops, bytes, seq});
    c.issued = seq;
  } catch (...) {
    cudaGetLastError();
    return 0;
  }
  c.work.notify_one();
  return seq;
}

void work_reporter::wait_delivered(std::uint64_t seq) {
  if (seq == 0) return;
  std::unique_lock lk(core_->mu);
  if (core_->thread == std::this_thread::get_id()) return;  // an observer synchronizing a stream
  core_->progress.wait(lk, [&] { return core_->stop || core_->delivered >= seq; });
}

std::shared_ptr<const clock_anchor> work_reporter::anchor() {
  std::lock_guard lk(anchor_mu_);
  if (!anchor_ || steady::now() - anchor_->taken > std::chrono::seconds(1))
    anchor_ = measure_anchor(core_->gpu, anchor_.get());
  return anchor_;
}

std::optional<std::pair<std::chrono::nanoseconds, std::chrono::nanoseconds>> work_reporter::times(const span& t) noexcept {
  float to_start = 0, length = 0;
  if (cudaEventSynchronize(t.end.get()) != cudaSuccess ||
      cudaEventElapsedTime(&to_start, t.anchor->event.get(), t.start.get()) != cudaSuccess ||
      cudaEventElapsedTime(&length, t.start.get(), t.end.get()) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  auto start = t.anchor->at + from_ms(to_start);
  return std::pair{start, start + from_ms(length)};
}

void work_reporter::run(const std::shared_ptr<core>& k) {
  auto& c = *k;
  if (cudaSetDevice(c.gpu->ordinal) != cudaSuccess) cudaGetLastError();  // then every wait fails: items dropped
  // Per stream, the end of its last item: rounding must not make a stream's items overlap.
  std::unordered_map<std::uint64_t, std::chrono::nanoseconds> last_end;
  std::unique_lock lk(c.mu);
  for (;;) {
    c.work.wait(lk, [&] { return c.stop || !c.queue.empty(); });
    if (c.stop) break;
    item it = std::move(c.queue.front());
    c.queue.pop_front();
    lk.unlock();
    auto t = times(it.times);
    lk.lock();
    if (c.stop) break;
    if (t && c.device->observed()) {
      auto& last = last_end[it.stream_id];
      auto start = std::max(t->first, last);
      last = std::max(t->second, start);
      work_record r{.name = &it.name,
                    .kind = device_kind::cuda,
                    .device_index = c.device_index,
                    .stream_id = it.stream_id,
                    .work = it.kind,
                    .start = start,
                    .end = last,
                    .flops = it.flops,
                    .bytes = it.bytes,
                    .modelled = false};
      c.notifying = true;
      lk.unlock();
      try {
        c.device->notify(r);
      } catch (...) {
        // Documented: observers must not throw. Swallowing keeps the reporter alive.
      }
      lk.lock();
      c.notifying = false;
      if (last_end.size() > 1024)  // streams that went quiet long ago
        std::erase_if(last_end, [&](const auto& e) { return e.second < start - std::chrono::seconds(10); });
    }
    c.delivered = it.seq;
    c.progress.notify_all();
    if (c.stop) break;
  }
  c.queue.clear();  // dropped: the device is gone
  c.progress.notify_all();
}

}  // namespace strata::cuda_backend
