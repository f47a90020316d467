#include "strata/trace.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define STRATA_TRACE_TSC 1
#endif

#include "strata/files.hpp"
#include "strata/type_meta.hpp"

namespace strata::trace {

namespace detail {
std::atomic<bool> enabled_flag{false};
}

namespace {

constexpr std::size_t chunk_records = 1 << 14;  // 640 KiB per chunk

struct thread_buffer {
  std::vector<std::unique_ptr<record[]>> chunks;
  std::size_t used = chunk_records;  // records used in the last chunk
  std::size_t count = 0;
  std::uint8_t thread = 0;
};

struct session {
  std::mutex m;
  bool active = false;
  std::uint64_t generation = 0;
  options opts;
  std::chrono::steady_clock::time_point start;
  // Timestamps are taken from the CPU's invariant time-stamp counter where there is one (a few
  // ns instead of a clock_gettime call) and converted with a ratio calibrated at start.
  std::uint64_t tsc0 = 0;
  double ticks_per_ns = 0;  // 0: use the steady clock
  double ns_per_tick = 0;
  std::uint64_t start_unix_ns = 0;
  job_info job;  // guarded by m
  std::vector<std::unique_ptr<thread_buffer>> buffers;
  std::atomic<std::uint64_t> total{0};
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint32_t> next_thread{0};
  // strings
  std::mutex strings_m;
  std::unordered_map<std::string, std::uint32_t> string_ids;
  std::vector<std::string> strings{""};
};

session& the_session() {
  static session* s = new session;  // never destroyed: threads may record during teardown
  return *s;
}

thread_local thread_buffer* tls_buffer = nullptr;
thread_local std::uint64_t tls_generation = 0;

thread_buffer* attach_thread(session& s) {
  std::lock_guard lock(s.m);
  if (!s.active) return nullptr;
  auto buf = std::make_unique<thread_buffer>();
  buf->thread = static_cast<std::uint8_t>(s.next_thread.fetch_add(1));
  tls_buffer = buf.get();
  tls_generation = s.generation;
  s.buffers.push_back(std::move(buf));
  return tls_buffer;
}

/// A launcher variable as a number; nullopt when unset or not a number.
std::optional<std::uint64_t> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n > UINT32_MAX) return std::nullopt;
  return n;
}

std::uint64_t fnv1a(std::string_view text) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

template <class T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

}  // namespace

namespace {
void record_event(session& s, std::uint64_t ts, event_kind kind, std::uint64_t actor, std::uint64_t peer,
                  std::uint64_t msg, std::uint32_t type, std::uint32_t arg) noexcept;

std::uint64_t now_ts(const session& s) noexcept {
#ifdef STRATA_TRACE_TSC
  if (s.ticks_per_ns > 0) {
    const std::uint64_t t = __rdtsc();
    return t > s.tsc0 ? t - s.tsc0 : 0;  // ticks; converted to ns when the file is written
  }
#endif
  auto since = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - s.start).count();
  return since > 0 ? static_cast<std::uint64_t>(since) : 0;
}
}  // namespace

void detail::emit_slow(event_kind kind, std::uint64_t actor, std::uint64_t peer, std::uint64_t msg,
                       std::uint32_t type, std::uint32_t arg) noexcept {
  session& s = the_session();
  record_event(s, now_ts(s), kind, actor, peer, msg, type, arg);
}

void detail::emit_at_slow(std::chrono::steady_clock::time_point when, event_kind kind, std::uint64_t actor,
                          std::uint64_t peer, std::uint64_t msg, std::uint32_t type, std::uint32_t arg) noexcept {
  session& s = the_session();
#ifdef STRATA_TRACE_TSC
  if (s.ticks_per_ns > 0) {
    // Into the recording's time base from the counter now, back by the (short) time since `when`:
    // `stop()` refines the tick rate over the whole session, and this stays exact under it.
    const auto now = std::chrono::steady_clock::now();
    const double ago = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - when).count());
    const double ticks = static_cast<double>(now_ts(s)) - ago * s.ticks_per_ns;
    record_event(s, ticks > 0 ? static_cast<std::uint64_t>(ticks) : 0, kind, actor, peer, msg, type, arg);
    return;
  }
#endif
  auto since = std::chrono::duration_cast<std::chrono::nanoseconds>(when - s.start).count();
  record_event(s, since > 0 ? static_cast<std::uint64_t>(since) : 0, kind, actor, peer, msg, type, arg);
}

std::uint64_t detail::stamp_slow() noexcept { return now_ts(the_session()); }

void detail::emit_stamped_slow(std::uint64_t stamp, event_kind kind, std::uint64_t actor, std::uint64_t peer,
                               std::uint64_t msg, std::uint32_t type, std::uint32_t arg) noexcept {
  session& s = the_session();
  // 0: recording began between the stamp and now.
  record_event(s, stamp != 0 ? stamp : now_ts(s), kind, actor, peer, msg, type, arg);
}

namespace {
void record_event(session& s, std::uint64_t ts, event_kind kind, std::uint64_t actor, std::uint64_t peer,
                  std::uint64_t msg, std::uint32_t type, std::uint32_t arg) noexcept {
  thread_buffer* buf = tls_buffer;
  if (buf == nullptr || tls_generation != s.generation) {
    try {
      buf = attach_thread(s);
    } catch (...) {
      buf = nullptr;
    }
    if (buf == nullptr) return;
  }
  if (s.opts.event_limit != 0 && s.total.fetch_add(1, std::memory_order_relaxed) >= s.opts.event_limit) {
    s.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (buf->used == chunk_records) {
    try {
      // Default-initialised (not zero-filled): every slot is written before it is read.
      buf->chunks.push_back(std::unique_ptr<record[]>(new record[chunk_records]));
    } catch (...) {
      s.dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    buf->used = 0;
  }
  record& r = buf->chunks.back()[buf->used++];
  r.ts_ns = ts;
  r.actor = actor;
  r.peer = peer;
  r.msg = msg;
  r.arg32 = arg;
  r.type = static_cast<std::uint16_t>(type > 0xffff ? 0xffff : type);
  r.kind = static_cast<std::uint8_t>(kind);
  r.thread = buf->thread;
  ++buf->count;
}
}  // namespace

std::uint32_t intern(std::string_view text) {
  session& s = the_session();
  std::lock_guard lock(s.strings_m);
  auto it = s.string_ids.find(std::string(text));
  if (it != s.string_ids.end()) return it->second;
  auto id = static_cast<std::uint32_t>(s.strings.size());
  s.strings.emplace_back(text);
  s.string_ids.emplace(std::string(text), id);
  return id;
}

job_info job_from_environment() {
  job_info j;
  std::optional<std::uint64_t> rank, size;
  for (auto [r, n] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, std::pair{"PMIX_RANK", ""},
                      std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    if (!rank) rank = env_number(r);
    if (!size && *n != '\0') size = env_number(n);
  }
  if (!rank) return j;  // no launcher: a world of one
  j.rank = static_cast<std::uint32_t>(*rank);
  j.world_size = size && *size > *rank ? static_cast<std::uint32_t>(*size) : 0;
  for (const char* var : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
      j.job_id = fnv1a(v);
      return j;
    }
  }
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  const char* slurm_step = std::getenv("SLURM_STEP_ID");
  if (slurm_job != nullptr && *slurm_job != '\0')
    j.job_id = fnv1a(std::string(slurm_job) + "." + (slurm_step != nullptr ? slurm_step : ""));
  return j;
}

void set_job(const job_info& job) {
  session& s = the_session();
  std::lock_guard lock(s.m);
  if (s.active) s.job = job;
}

job_info job() {
  session& s = the_session();
  std::lock_guard lock(s.m);
  return s.job;
}

bool start(const options& opts) {
#ifdef STRATA_TRACE_COMPILED_OUT
  (void)opts;
  return false;
#else
  session& s = the_session();
  std::lock_guard lock(s.m);
  if (s.active) return false;
  s.active = true;
  ++s.generation;
  s.opts = opts;
  s.job = job_from_environment();
  s.buffers.clear();
  s.total = 0;
  s.dropped = 0;
  s.next_thread = 0;
  // The wall clock at the same moment as the steady origin of every timestamp: strata-trace merge
  // aligns ranks by it, so the two reads are bracketed by steady reads and retried when a
  // preemption separated them.
  for (int attempt = 0; attempt < 16; ++attempt) {
    const auto before = std::chrono::steady_clock::now();
    const auto wall = std::chrono::system_clock::now();
    const auto after = std::chrono::steady_clock::now();
    s.start = before + (after - before) / 2;
    s.start_unix_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(wall.time_since_epoch()).count());
    if (after - before < std::chrono::microseconds(2)) break;
  }
  s.ticks_per_ns = 0;
#ifdef STRATA_TRACE_TSC
  {  // calibrate the time-stamp counter against the steady clock over ~2 ms
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t c0 = __rdtsc();
    auto t1 = t0;
    while (t1 - t0 < std::chrono::milliseconds(2)) t1 = std::chrono::steady_clock::now();
    const std::uint64_t c1 = __rdtsc();
    const double ns = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    if (c1 > c0 && ns > 0) {
      s.ticks_per_ns = static_cast<double>(c1 - c0) / ns;
      s.ns_per_tick = 1.0 / s.ticks_per_ns;
      s.tsc0 = c0 - static_cast<std::uint64_t>(static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t0 - s.start).count()) * s.ticks_per_ns);
    }
  }
#endif
  {
    std::lock_guard slock(s.strings_m);
    s.string_ids.clear();
    s.strings.assign(1, "");
  }
  detail::enabled_flag.store(true, std::memory_order_release);
  return true;
#endif
}

bool active() noexcept {
  session& s = the_session();
  std::lock_guard lock(s.m);
  return s.active;
}

summary stop() {
  session& s = the_session();
  summary out;
  std::vector<std::unique_ptr<thread_buffer>> buffers;
  std::vector<std::string> strings;
  job_info job;
  {
    std::lock_guard lock(s.m);
    job = s.job;
    if (!s.active) return out;
    detail::enabled_flag.store(false, std::memory_order_release);
    s.active = false;
    ++s.generation;  // threads re-attach in a later session
    buffers.swap(s.buffers);
    std::lock_guard slock(s.strings_m);
    strings = s.strings;
  }
  out.file = s.opts.file;
  // Ranks of one job share the file name they are given: each writes its own (a world of one keeps
  // the name, and version 1, exactly as before there were ranks).
  const bool ranked = job.world_size != 1;
  if (ranked) out.file += ".rank" + std::to_string(job.rank);
  out.dropped = s.dropped.load();

  std::vector<record> events;
  std::size_t n = 0;
  for (auto& b : buffers) n += b->count;
  events.reserve(n);
  for (auto& b : buffers) {
    for (std::size_t c = 0; c < b->chunks.size(); ++c) {
      std::size_t used = c + 1 == b->chunks.size() ? b->used : chunk_records;
      events.insert(events.end(), b->chunks[c].get(), b->chunks[c].get() + used);
    }
  }
  if (s.ticks_per_ns > 0) {
    // The rate calibrated over 2 ms at start is off by up to ~0.1 %: 100 us after 100 ms, enough to
    // put a message's handling on another rank before its send. Over the whole session (at least
    // 20 ms) the steady clock's jitter is negligible.
    double ns_per_tick = s.ns_per_tick;
#ifdef STRATA_TRACE_TSC
    const std::uint64_t ticks = now_ts(s);
    const double ns = static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - s.start).count());
    if (ns > 20e6 && ticks > 0) ns_per_tick = ns / static_cast<double>(ticks);
#endif
    for (auto& e : events) e.ts_ns = static_cast<std::uint64_t>(static_cast<double>(e.ts_ns) * ns_per_tick);
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const record& a, const record& b) { return a.ts_ns < b.ts_ns; });
  out.events = events.size();

  // Message type names: every id referenced by a message event.
  std::uint32_t max_type = 0;
  for (const auto& e : events) {
    auto k = static_cast<event_kind>(e.kind);
    if (k == event_kind::send || k == event_kind::enqueue || k == event_kind::handler_begin ||
        k == event_kind::handler_end || k == event_kind::drop || k == event_kind::unhandled ||
        k == event_kind::timer_fire || k == event_kind::remote_send || k == event_kind::remote_recv)
      max_type = std::max<std::uint32_t>(max_type, e.type);
  }

  std::string blob;
  blob.append("STRATATR", 8);
  put<std::uint32_t>(blob, ranked ? 2 : 1);          // version
  put<std::uint32_t>(blob, sizeof(record));          // record size
  put<std::uint64_t>(blob, s.start_unix_ns);
  put<std::uint64_t>(blob, events.size());
  put<std::uint64_t>(blob, out.dropped);
  put<std::uint32_t>(blob, static_cast<std::uint32_t>(strings.size()));
  put<std::uint32_t>(blob, max_type);
  if (ranked) {
    put<std::uint32_t>(blob, job.rank);
    put<std::uint32_t>(blob, job.world_size);
    put<std::uint64_t>(blob, job.job_id);
    put<std::int64_t>(blob, job.clock_offset_ns);
    put<std::uint64_t>(blob, job.clock_uncertainty_ns);
  }
  for (const auto& str : strings) {
    put<std::uint32_t>(blob, static_cast<std::uint32_t>(str.size()));
    blob.append(str);
  }
  for (std::uint32_t id = 1; id <= max_type; ++id) {
    std::string name = type_name(id);
    put<std::uint32_t>(blob, static_cast<std::uint32_t>(name.size()));
    blob.append(name);
  }
  blob.append(reinterpret_cast<const char*>(events.data()), events.size() * sizeof(record));

  // Atomic replace (strata/files.hpp): a crash never leaves a half-written trace. Every error
  // names the target, then the step and the system's reason (a missing directory, a full disk).
  const std::string tmp = out.file + ".tmp." + std::to_string(::getpid());
  if (auto written = write_file_atomically(out.file, blob, tmp); !written) {
    out.error = "cannot write trace file '" + out.file + "': " + written.error().message();
    return out;
  }
  out.written = true;
  return out;
}

}  // namespace strata::trace
