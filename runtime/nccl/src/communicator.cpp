#include "strata/nccl/communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "logic.hpp"
#include "strata/device/work.hpp"

static_assert(NCCL_UNIQUE_ID_BYTES == strata::nccl::detail::unique_id_bytes);

namespace strata::nccl {

namespace {

using clock = std::chrono::steady_clock;

std::string nccl_text(const char* call, ncclResult_t r, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return detail::failure_text(call, ncclGetErrorString(r), last != nullptr ? last : "");
}

/// Makes `ordinal` the calling thread's CUDA device and restores the previous one.
struct current_gpu {
  int previous = -1;
  explicit current_gpu(int ordinal) {
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    (void)cudaSetDevice(ordinal);
  }
  ~current_gpu() {
    if (previous >= 0) (void)cudaSetDevice(previous);
  }
  current_gpu(const current_gpu&) = delete;
  current_gpu& operator=(const current_gpu&) = delete;
};

clock::time_point deadline_of(std::chrono::milliseconds timeout) {
  return timeout.count() > 0 ? clock::now() + timeout : clock::time_point::max();
}

/// Polls a non-blocking communicator until it leaves ncclInProgress or `deadline` passes
/// (`timed_out` then set).
ncclResult_t settle(ncclComm_t comm, ncclResult_t r, clock::time_point deadline, bool& timed_out) {
  timed_out = false;
  while (r == ncclInProgress) {
    if (clock::now() > deadline) {
      timed_out = true;
      return r;
    }
    std::this_thread::yield();
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    r = q != ncclSuccess ? q : state;
  }
  return r;
}

std::string ms_text(std::chrono::milliseconds t) { return std::to_string(t.count()) + " ms"; }

}  // namespace

struct communicator::state {
  device dev;
  int gpu = -1;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{};

  std::shared_mutex calls;    // shared: a call into `comm`; exclusive: abort and destroy
  ncclComm_t comm = nullptr;  // guarded by `calls`; null once aborted

  mutable std::mutex mu;  // guards what follows
  error failed;
  struct collective {
    event start, end;
    std::optional<clock::time_point> started;  // when the watch first saw `start` complete
  };
  std::deque<collective> pending;
  bool stopping = false;
  std::condition_variable cv;
  std::thread watch;

  ~state() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (watch.joinable()) watch.join();
    std::unique_lock lock(calls);
    if (comm == nullptr) return;
    current_gpu g(gpu);
    // Finalize waits for this rank's collectives; bounded by the timeout, then aborted.
    bool timed_out = false;
    ncclResult_t r = settle(comm, ncclCommFinalize(comm), deadline_of(timeout), timed_out);
    if (timed_out || r != ncclSuccess)
      (void)ncclCommAbort(comm);
    else
      (void)ncclCommDestroy(comm);
    comm = nullptr;
  }

  error failure() const {
    std::lock_guard lock(mu);
    return failed;
  }

  void abort(const std::string& reason) {
    std::unique_lock lock(calls);
    {
      std::lock_guard l(mu);
      if (failed) return;
      failed = error(errc::runtime_failure, "the NCCL communicator (rank " + std::to_string(rank) + " of " +
                                                std::to_string(size) + ") was aborted: " + reason);
    }
    if (comm != nullptr) {
      current_gpu g(gpu);
      (void)ncclCommAbort(comm);
      comm = nullptr;
    }
  }

  /// Called when a stream reaches the group: enqueues it on `s`. Throws (the stream's error).
  void enqueue_allreduce(const std::vector<std::pair<void*, std::size_t>>& buffers, cudaStream_t s) {
    std::shared_lock lock(calls);
    if (comm == nullptr) throw std::runtime_error(failure().message());
    ncclResult_t first = ncclGroupStart();
    const char* first_call = "ncclGroupStart";
    if (first == ncclSuccess) {
      for (auto& [p, n] : buffers) {
        const ncclResult_t r = ncclAllReduce(p, p, n, ncclFloat, ncclSum, comm, s);
        if (r != ncclSuccess && r != ncclInProgress && first == ncclSuccess) {
          first = r;
          first_call = "ncclAllReduce";
        }
      }
      const ncclResult_t end = ncclGroupEnd();
      if (first == ncclSuccess) {
        first = end;
        first_call = "ncclGroupEnd";
      }
    }
    bool timed_out = false;
    first = settle(comm, first, deadline_of(timeout), timed_out);
    if (timed_out)
      throw std::runtime_error("ncclGroupEnd (allreduce_sum) did not finish enqueueing within " + ms_text(timeout));
    if (first != ncclSuccess) throw std::runtime_error(nccl_text(first_call, first, comm));
  }

  /// The watch: aborts when a collective runs longer than the timeout after its inputs were
  /// ready, or when NCCL reports an asynchronous error.
  void run_watch() {
    std::unique_lock lock(mu);
    while (!stopping) {
      cv.wait_for(lock, std::chrono::milliseconds(50));
      if (stopping || failed) continue;
      std::optional<std::string> reason;
      const auto now = clock::now();
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->end.query()) {
          it = pending.erase(it);
          continue;
        }
        if (!it->started && it->start.query()) it->started = now;
        if (timeout.count() > 0 && it->started && now - *it->started > timeout)
          reason = "an allreduce_sum did not finish within " + ms_text(timeout) +
                   " of its inputs being ready (a rank may have died or not joined)";
        ++it;
      }
      if (!reason && !pending.empty()) {
        lock.unlock();
        {
          std::shared_lock c(calls);
          ncclResult_t st = ncclSuccess;
          if (comm != nullptr && ncclCommGetAsyncError(comm, &st) == ncclSuccess && st != ncclSuccess &&
              st != ncclInProgress)
            reason = nccl_text("ncclCommGetAsyncError", st, comm);
        }
        lock.lock();
      }
      if (reason) {
        pending.clear();
        lock.unlock();
        abort(*reason);
        lock.lock();
      }
    }
  }

  static expected<communicator> make(const device& d, int rank, int size, const detail::unique_id& id,
                                     communicator_config config) {
    auto st = std::make_shared<state>();
    st->dev = d;
    st->gpu = d.properties().gpu_ordinal;
    st->rank = rank;
    st->size = size;
    st->timeout = config.timeout;
    const std::string where = " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ", " + d.name() + ")";
    current_gpu g(st->gpu);
    ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
    conf.blocking = 0;  // so that a rank that never joins ends in a timeout, not a hang
    ncclUniqueId nid;
    std::memcpy(nid.internal, id.data(), id.size());
    ncclComm_t c = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&c, size, nid, rank, &conf);
    bool timed_out = false;
    if (c != nullptr) r = settle(c, r, deadline_of(config.timeout), timed_out);
    if (timed_out) {
      (void)ncclCommAbort(c);
      return error(errc::runtime_failure, "ncclCommInitRankConfig did not finish within " + ms_text(config.timeout) +
                                              where + ": a rank may have died or not called communicator::create");
    }
    if (r != ncclSuccess) {
      std::string text = nccl_text("ncclCommInitRankConfig", r, c) + where;
      if (c != nullptr) (void)ncclCommAbort(c);
      return error(errc::runtime_failure, std::move(text));
    }
    st->comm = c;
    st->watch = std::thread([raw = st.get()] { raw->run_watch(); });
    return communicator(std::move(st));
  }
};

communicator::communicator(std::shared_ptr<state> s) noexcept : state_(std::move(s)) {}
communicator::communicator(communicator&&) noexcept = default;
communicator& communicator::operator=(communicator&&) noexcept = default;
communicator::~communicator() = default;

int communicator::rank() const noexcept { return state_->rank; }
int communicator::size() const noexcept { return state_->size; }
const device& communicator::get_device() const noexcept { return state_->dev; }
error communicator::failure() const { return state_->failure(); }
void communicator::abort(const std::string& reason) { state_->abort(reason); }

expected<communicator> communicator::create_single(const device& cuda_device, communicator_config config) {
  if (auto ok = detail::check_device(cuda_device); !ok) return ok.error();
  ncclUniqueId nid;
  if (ncclResult_t r = ncclGetUniqueId(&nid); r != ncclSuccess)
    return error(errc::runtime_failure, nccl_text("ncclGetUniqueId", r, nullptr));
  detail::unique_id id{};
  std::memcpy(id.data(), nid.internal, id.size());
  return state::make(cuda_device, 0, 1, id, config);
}

expected<communicator> communicator::create(net::endpoint& net, const device& cuda_device, communicator_config config) {
  error local;
  if (auto ok = detail::check_device(cuda_device); !ok) local = ok.error();
  detail::unique_id id{};
  if (!local && net.rank() == 0) {
    ncclUniqueId nid;
    if (ncclResult_t r = ncclGetUniqueId(&nid); r != ncclSuccess)
      local = error(errc::runtime_failure, nccl_text("ncclGetUniqueId", r, nullptr));
    else
      std::memcpy(id.data(), nid.internal, id.size());
  }
  // Every rank joins the exchange, ready or not, so that none waits for one that gave up. On a
  // timeout the buffer stays allocated: MPI may still write into it.
  auto* exchange = new std::vector<float>(detail::pack_id_exchange(!local, net.rank() == 0 && !local ? &id : nullptr));
  auto done = net.allreduce_sum(*exchange);
  if (config.timeout.count() > 0 && done.wait_for(config.timeout) != std::future_status::ready)
    return error(errc::runtime_failure, "the NCCL id exchange did not finish within " + ms_text(config.timeout) +
                                            " (rank " + std::to_string(net.rank()) +
                                            "): a rank may have died or not called communicator::create");
  std::unique_ptr<std::vector<float>> owned(exchange);
  if (auto r = done.get(); !r) return r.error();
  if (local) return local;
  auto got = detail::unpack_id_exchange(*owned, net.size());
  if (!got) return got.error();
  return state::make(cuda_device, net.rank(), net.size(), *got, config);
}

expected<void> communicator::allreduce_sum(std::vector<tensor>& cuda_tensors, const stream& s) {
  auto& st = *state_;
  if (auto f = st.failure()) return f;
  if (auto ok = detail::check_allreduce_inputs(cuda_tensors, st.gpu, s); !ok) return ok.error();
  if (cuda_tensors.empty()) return {};
  std::vector<std::pair<void*, std::size_t>> buffers;
  double elements = 0;
  for (auto& t : cuda_tensors) {
    buffers.emplace_back(t.raw_data(), static_cast<std::size_t>(t.numel()));
    elements += static_cast<double>(t.numel());
  }
  stream str = s;
  try {
    for (auto& t : cuda_tensors) str.wait(t.ready_event());
    event start = str.record();
    str.launch({.name = "nccl_allreduce_sum",
                .kind = work_kind::pointwise,
                .flops = elements * (st.size - 1),
                .bytes = 3.0 * 4.0 * elements,
                .cuda = [sp = state_, buffers](const cuda_launch_context& c) {
                  sp->enqueue_allreduce(buffers, static_cast<cudaStream_t>(c.stream));
                }});
    event end = str.record();
    for (auto& t : cuda_tensors) {
      t.set_ready_event(end);
      t.storage().record_stream(str);
    }
    std::lock_guard lock(st.mu);
    st.pending.push_back({std::move(start), std::move(end), std::nullopt});
  } catch (const std::exception& ex) {
    return error(errc::runtime_failure, std::string("allreduce_sum could not be enqueued: ") + ex.what());
  }
  return {};
}

}  // namespace strata::nccl
