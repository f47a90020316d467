#include "device/sim_backend.hpp"

#include "device/queued_stream.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <string>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

namespace strata::sim_backend {

using namespace detail;

// ---- clock --------------------------------------------------------------------------------------
// The io_context lives in `core`, shared with the thread, so the clock may be destroyed on its own
// thread (the last handler dropping the last device): the thread is then detached and finishes
// when the io_context runs out of work.
class sim_clock {
 public:
  struct core {
    asio::io_context io;
    asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
  };

  sim_clock(double scale, bool follow)
      : time_scale(scale > 0 && std::isfinite(scale) ? scale : 0.0),
        follow_host(follow && time_scale > 0),
        epoch(steady::now()),
        core_(std::make_shared<core>()) {
    thread_ = std::thread([c = core_] { c->io.run(); });
  }

  ~sim_clock() {
    core_->guard.reset();
    if (thread_.get_id() == std::this_thread::get_id())
      thread_.detach();
    else
      thread_.join();
  }

  asio::io_context& io() { return core_->io; }

  /// Modelled seconds corresponding to wall time `t` (0 when time does not follow the wall clock).
  double modelled_at(steady::time_point t) const {
    if (time_scale <= 0) return 0;
    return std::max(0.0, std::chrono::duration<double>(t - epoch).count() / time_scale);
  }
  double host_now() const { return follow_host ? modelled_at(steady::now()) : 0.0; }
  /// Wall time at which modelled time `s` is reached.
  steady::time_point wall_at(double s) const {
    return epoch + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(s * time_scale));
  }
  /// Latest modelled time already reached in wall time (+inf when not waiting at all).
  double reached() const {
    return time_scale > 0 ? modelled_at(steady::now()) : std::numeric_limits<double>::infinity();
  }

  const double time_scale;
  const bool follow_host;
  const steady::time_point epoch;

 private:
  std::shared_ptr<core> core_;
  std::thread thread_;
};

std::shared_ptr<sim_clock> make_clock(double time_scale, bool follow_host_clock) {
  return std::make_shared<sim_clock>(time_scale, follow_host_clock);
}

namespace {

// ---- device -------------------------------------------------------------------------------------
class sim_device final : public device_impl {
 public:
  sim_device(device_properties p, std::shared_ptr<sim_clock> c) : device_impl(std::move(p)), clock(std::move(c)) {}

  std::shared_ptr<stream_impl> create_stream(stream_priority priority) override;

  std::shared_ptr<allocation> allocate(std::size_t bytes, const std::shared_ptr<stream_impl>& s) override {
    auto cap = props.sim->memory_bytes;
    auto now = counters_.in_use.load();
    do {
      if (cap > 0 && (bytes > cap || now > cap - bytes))
        throw device_error(device_errc::out_of_memory,
                           props.name + ": cannot allocate " + std::to_string(bytes) + " bytes; " +
                               std::to_string(now) + " of the profile's " + std::to_string(cap) + " bytes are in use");
    } while (!counters_.in_use.compare_exchange_weak(now, now + bytes));
    counters_.allocations.fetch_add(1);
    auto peak = counters_.peak.load();
    while (now + bytes > peak && !counters_.peak.compare_exchange_weak(peak, now + bytes)) {
    }
    return std::make_shared<allocation>(s, nullptr, bytes, bytes);
  }

  void release(void*, std::size_t bytes, std::size_t, std::vector<std::shared_ptr<stream_impl>> streams) noexcept override {
    try {
      auto me = std::static_pointer_cast<sim_device>(shared_from_this());
      after_all(streams, [me, bytes] { me->counters_.on_release(bytes); });
    } catch (...) {
    }
  }

  memory_stats memory() const override {
    return {.bytes_in_use = counters_.in_use.load(),
            .peak_bytes_in_use = counters_.peak.load(),
            .bytes_cached = 0,
            .allocations = counters_.allocations.load(),
            .cache_hits = 0};
  }

  const std::shared_ptr<sim_clock> clock;

 private:
  pool_counters counters_;
};

// ---- stream -------------------------------------------------------------------------------------
// Operations are modelled when submitted (under the lock): each gets its modelled completion time
// from the stream's `busy_until_`. Their effects (firing points, callbacks, observer) are queued in
// `done_` in time order and run by one steady_timer per stream on the clock thread when the wall
// clock reaches them. A wait for a point whose modelled time is unknown (another backend's event,
// or a sim record still queued) gates the stream: later operations queue in `gated_` until it fires.
class sim_stream final : public queued_stream {
 public:
  sim_stream(std::shared_ptr<device_impl> dev, stream_priority p)
      : queued_stream(std::move(dev), p), timer_(static_cast<sim_device&>(*device).clock->io()) {}

  void launch(kernel_work work) override {
    double seconds = cost(work_fields(work));
    submit(op{.type = op_type::run, .work = std::move(work), .seconds = seconds});
  }

  void copy(const std::shared_ptr<allocation>& dst, const std::shared_ptr<allocation>& src, std::size_t n) override {
    const auto& pr = *device->props.sim;
    auto here = [&](const std::shared_ptr<allocation>& a) { return a->stream->device == device; };
    auto host = [&](const std::shared_ptr<allocation>& a) { return a->stream->device->props.kind != device_kind::sim; };
    double b = static_cast<double>(n);
    double seconds = here(dst) && here(src) ? 2 * b / pr.memory_bandwidth
                     : host(dst) || host(src) ? b / pr.host_bandwidth
                                               : b / pr.peer_bandwidth;
    launch_copy(seconds, n);
  }
  void copy_from_host(const std::shared_ptr<allocation>&, const void*, std::size_t n) override {
    launch_copy(static_cast<double>(n) / device->props.sim->host_bandwidth, n);
  }
  void copy_to_host(void*, const std::shared_ptr<allocation>&, std::size_t n) override {
    launch_copy(static_cast<double>(n) / device->props.sim->host_bandwidth, n);
  }

 private:
  struct done_entry {
    double at = 0;  // modelled completion time
    op o;
    double start = 0;  // work: modelled start
    std::exception_ptr error;
  };

  struct fields {
    work_kind kind;
    double flops, bytes;
  };
  static fields work_fields(const kernel_work& w) { return {w.kind, w.flops, w.bytes}; }

  double cost(fields f) const {
    const auto& pr = *device->props.sim;
    double rate = f.kind == work_kind::matmul ? pr.matmul_flops : pr.vector_flops;
    double compute = rate > 0 ? f.flops / rate : 0;
    double memory = pr.memory_bandwidth > 0 ? f.bytes / pr.memory_bandwidth : 0;
    return std::max(compute, memory) + pr.launch_latency;
  }

  void launch_copy(double seconds, std::size_t n) {
    if (!std::isfinite(seconds)) seconds = 0;
    submit(op{.type = op_type::run,
              .work = kernel_work{.name = "copy", .kind = work_kind::copy, .bytes = static_cast<double>(n)},
              .seconds = seconds + device->props.sim->launch_latency});
  }

  sim_clock& clock() const { return *static_cast<sim_device&>(*device).clock; }
  std::shared_ptr<sim_stream> self() { return std::static_pointer_cast<sim_stream>(shared_from_this()); }

  void submit(op o) override {
    std::unique_lock lk(mu_);
    if (gated_) {
      pending_.push_back(std::move(o));
      return;
    }
    process(std::move(o), lk);
  }

  // Models `o`. Called with mu_ held and the stream not gated.
  void process(op o, std::unique_lock<std::mutex>& lk) {
    switch (o.type) {
      case op_type::run: {
        double start = std::max(busy_until_, clock().host_now());
        busy_until_ = start + o.seconds;
        push_done({.at = busy_until_, .o = std::move(o), .start = start, .error = error_});
        break;
      }
      case op_type::record:
        o.point->modelled.store(busy_until_);
        push_done({.at = busy_until_, .o = std::move(o), .error = error_});
        break;
      case op_type::notify:
        push_done({.at = busy_until_, .o = std::move(o), .error = error_});
        break;
      case op_type::wait: {
        auto p = std::move(o.point);
        double t = p->modelled.load();
        if (t >= 0) {
          busy_until_ = std::max(busy_until_, t);
          break;
        }
        if (p->done()) {
          resolve(*p);
          break;
        }
        gated_ = true;
        auto me = self();
        lk.unlock();  // on_fire may not run fn, but fire() could run it concurrently: no lock held then
        bool parked = p->on_fire([me, p] { me->resume(*p); });
        lk.lock();
        if (!parked) {
          resolve(*p);
          gated_ = false;
          drain(lk);
        }
        break;
      }
    }
  }

  // A waited point completed: the stream's modelled time cannot be earlier than it.
  void resolve(const event_point& p) {
    double t = p.modelled.load();
    if (t < 0) t = clock().modelled_at(p.fired_at());
    busy_until_ = std::max(busy_until_, t);
    if (auto e = p.error(); e && !error_) error_ = e;
  }

  void resume(const event_point& p) {
    std::unique_lock lk(mu_);
    resolve(p);
    gated_ = false;
    drain(lk);
  }

  void drain(std::unique_lock<std::mutex>& lk) {
    while (!gated_ && !pending_.empty()) {
      op o = std::move(pending_.front());
      pending_.pop_front();
      process(std::move(o), lk);
    }
  }

  void push_done(done_entry e) {
    done_.push_back(std::move(e));
    if (!armed_ && !arm_posted_) {
      arm_posted_ = true;
      asio::post(clock().io(), [me = self()] { me->arm(); });
    }
  }

  // Clock thread: wait for the wall time of the earliest queued completion.
  void arm() {
    double at;
    {
      std::lock_guard lk(mu_);
      arm_posted_ = false;
      if (armed_ || done_.empty()) return;
      armed_ = true;
      at = done_.front().at;
    }
    timer_.expires_at(clock().wall_at(at));
    timer_.async_wait([me = self(), at](const std::error_code&) { me->on_timer(at); });
  }

  // Clock thread: run every completion whose modelled time has been reached, in order.
  void on_timer(double at) {
    std::deque<done_entry> ready;
    {
      std::lock_guard lk(mu_);
      armed_ = false;
      double limit = std::max(at, clock().reached());
      while (!done_.empty() && done_.front().at <= limit) {
        ready.push_back(std::move(done_.front()));
        done_.pop_front();
      }
    }
    for (auto& e : ready) complete(e);
    ready.clear();  // drop captured state before arming again
    arm();
  }

  void complete(done_entry& e) {
    switch (e.o.type) {
      case op_type::run:
        if (device->observed())
          device->notify({.name = &e.o.work.name,
                          .kind = device_kind::sim,
                          .device_index = device->props.index,
                          .stream_id = id,
                          .work = e.o.work.kind,
                          .start = to_ns(e.start),
                          .end = to_ns(e.at),
                          .flops = e.o.work.flops,
                          .bytes = e.o.work.bytes,
                          .modelled = true});
        break;
      case op_type::record:
        e.o.point->fire(e.error);
        break;
      case op_type::notify:
        try {
          e.o.callback(e.error);
        } catch (...) {
          // Documented: callbacks must not throw.
        }
        break;
      case op_type::wait:
        break;
    }
  }

  static std::chrono::nanoseconds to_ns(double s) {
    return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(s * 1e9)));
  }

  double busy_until_ = 0;
  bool gated_ = false;
  std::deque<op> pending_;
  std::deque<done_entry> done_;
  bool armed_ = false;
  bool arm_posted_ = false;
  asio::steady_timer timer_;  // used on the clock thread only
};

std::shared_ptr<stream_impl> sim_device::create_stream(stream_priority priority) {
  return std::make_shared<sim_stream>(shared_from_this(), priority);
}

}  // namespace

std::vector<std::shared_ptr<device_impl>> make_devices(const std::shared_ptr<sim_clock>& clock, int count,
                                                       int first_index, const sim_profile& profile) {
  std::vector<std::shared_ptr<device_impl>> out;
  for (int i = 0; i < count; ++i) {
    device_properties p;
    p.kind = device_kind::sim;
    p.index = first_index + i;
    p.name = "sim:" + std::to_string(p.index);
    p.total_memory = profile.memory_bytes;
    p.concurrency = 1;
    p.hardware = profile.name;
    p.sim = profile;
    out.push_back(std::make_shared<sim_device>(std::move(p), clock));
  }
  return out;
}

}  // namespace strata::sim_backend
