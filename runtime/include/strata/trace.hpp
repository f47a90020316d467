#pragma once
/// \file
/// Trace recording: fixed-size binary events into per-thread buffers.
///
/// Recording is process-wide. When it is off, each record site costs one predictable branch
/// (`trace::enabled()` reads one relaxed atomic); building with `-DSTRATA_TRACING=OFF` defines
/// STRATA_TRACE_COMPILED_OUT and removes the record sites entirely. The file format is
/// documented in docs/trace-format.md.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::trace {

/// What an event records. Values are part of the file format: never renumber.
enum class event_kind : std::uint8_t {
  spawn = 1,          ///< actor=new actor, peer=parent (0 if none), arg=string id of its name
  exit = 2,           ///< actor, arg=errc of the reason, msg=string id of the reason text
  send = 3,           ///< actor=sender (0 outside actors), peer=receiver, msg, type
  enqueue = 4,        ///< actor=receiver, peer=sender, msg, type, arg=1 if it woke the actor
  handler_begin = 5,  ///< actor, peer=sender, msg, type
  handler_end = 6,    ///< actor, msg, type, flags bit0 = handler threw
  drop = 7,           ///< actor=intended receiver, peer=sender, msg, type, arg=errc why
  unhandled = 8,      ///< actor, peer=sender, msg, type
  timer_fire = 9,     ///< actor=receiver, msg, type
  device_begin = 10,  ///< actor=device id, peer=stream id, msg=work id, arg=string id of the work name
  device_end = 11,    ///< same keys as device_begin
  tag = 12,           ///< actor, arg=user value, msg=string id of the tag name
  remote_send = 13,   ///< actor=sender (0 outside actors), peer=receiver's handle id here, msg, type, arg=its rank
  remote_recv = 14,   ///< actor=receiver, peer=message id on the sending rank, msg=id here, type, arg=sending rank
  placement = 15,     ///< actor, arg=the rank it ran on (written by `strata-trace merge`)
  transfer_begin = 16,  ///< actor=this rank, peer=the other rank (0: a collective), msg=MPI tag or collective number,
                        ///< type=`transfer`, arg=bytes (saturated at 2^32-1); posted by the communication thread
  transfer_end = 17,    ///< same keys as transfer_begin; seen complete by the communication thread
};

/// What a transfer event (`transfer_begin` / `transfer_end`) moved; its `type` field.
enum class transfer : std::uint16_t {
  send = 1,       ///< a chunk of a tensor's data to `peer`
  receive = 2,    ///< a chunk of a tensor's data from `peer`
  allreduce = 3,  ///< an MPI allreduce of float32 values over every rank
};

/// One event, 40 bytes on disk and in memory (little-endian, no padding).
struct record {
  std::uint64_t ts_ns;   ///< Nanoseconds since the trace started (steady clock).
  std::uint64_t actor;
  std::uint64_t peer;
  std::uint64_t msg;
  std::uint32_t arg32;   ///< Small argument (see event_kind).
  std::uint16_t type;    ///< Message type id or string id (see event_kind).
  std::uint8_t kind;     ///< event_kind
  std::uint8_t thread;   ///< Recording thread's index (wraps at 256).
};
static_assert(sizeof(record) == 40);

namespace detail {
extern std::atomic<bool> enabled_flag;
void emit_slow(event_kind kind, std::uint64_t actor, std::uint64_t peer, std::uint64_t msg,
               std::uint32_t type, std::uint32_t arg) noexcept;
void emit_at_slow(std::chrono::steady_clock::time_point when, event_kind kind, std::uint64_t actor,
                  std::uint64_t peer, std::uint64_t msg, std::uint32_t type, std::uint32_t arg) noexcept;
std::uint64_t stamp_slow() noexcept;
void emit_stamped_slow(std::uint64_t stamp, event_kind kind, std::uint64_t actor, std::uint64_t peer,
                       std::uint64_t msg, std::uint32_t type, std::uint32_t arg) noexcept;
}  // namespace detail

/// True while recording; one relaxed load.
inline bool enabled() noexcept {
#ifdef STRATA_TRACE_COMPILED_OUT
  return false;
#else
  return detail::enabled_flag.load(std::memory_order_relaxed);
#endif
}

/// Records one event when recording is on. Lock-free; safe from any thread.
inline void emit(event_kind kind, std::uint64_t actor, std::uint64_t peer, std::uint64_t msg,
                 std::uint32_t type, std::uint32_t arg = 0) noexcept {
#ifndef STRATA_TRACE_COMPILED_OUT
  if (enabled()) [[unlikely]]
    detail::emit_slow(kind, actor, peer, msg, type, arg);
#else
  (void)kind, (void)actor, (void)peer, (void)msg, (void)type, (void)arg;
#endif
}

/// Like `emit`, stamped with `when` instead of now: for what is observed after the fact, such as
/// a device work item's start and end reported on completion.
inline void emit_at(std::chrono::steady_clock::time_point when, event_kind kind, std::uint64_t actor,
                    std::uint64_t peer, std::uint64_t msg, std::uint32_t type, std::uint32_t arg = 0) noexcept {
#ifndef STRATA_TRACE_COMPILED_OUT
  if (enabled()) [[unlikely]]
    detail::emit_at_slow(when, kind, actor, peer, msg, type, arg);
#else
  (void)when, (void)kind, (void)actor, (void)peer, (void)msg, (void)type, (void)arg;
#endif
}

/// The recording's clock now, in its own time base; 0 when not recording. With `emit_stamped`, an
/// event can be stamped before the action it records and written after it (an enqueue is stamped
/// before the push, so that the receiver's handling can never appear to come first).
inline std::uint64_t stamp() noexcept {
#ifndef STRATA_TRACE_COMPILED_OUT
  if (enabled()) [[unlikely]]
    return detail::stamp_slow();
#endif
  return 0;
}

/// Records one event with a time taken earlier by `stamp()`.
inline void emit_stamped(std::uint64_t stamp, event_kind kind, std::uint64_t actor, std::uint64_t peer,
                         std::uint64_t msg, std::uint32_t type, std::uint32_t arg = 0) noexcept {
#ifndef STRATA_TRACE_COMPILED_OUT
  if (enabled()) [[unlikely]]
    detail::emit_stamped_slow(stamp, kind, actor, peer, msg, type, arg);
#else
  (void)stamp, (void)kind, (void)actor, (void)peer, (void)msg, (void)type, (void)arg;
#endif
}

/// Interns a string (actor name, work name, reason) and returns its id for `record` fields.
/// Thread-safe; takes a lock, so keep it off hot paths (intern once, reuse the id).
std::uint32_t intern(std::string_view text);

/// Where this process sits in a job of several processes (an mpirun job). A rank of a world of
/// more than one writes `FILE.rank<r>` in format version 2, whose header records these fields so
/// that `strata-trace merge` can align and join the ranks' files (docs/trace-format.md).
struct job_info {
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;           ///< 0: a launcher started the process but did not say how many.
  std::uint64_t job_id = 0;               ///< The same on every rank of one job; 0: unknown.
  std::int64_t clock_offset_ns = 0;       ///< Add to this rank's wall clock to get rank 0's.
  std::uint64_t clock_uncertainty_ns = 0; ///< Bound on the error of `clock_offset_ns`; 0: not measured.
};

/// The job of the launcher's environment: rank and size from `OMPI_COMM_WORLD_RANK`/`_SIZE`,
/// `PMIX_RANK` or `PMI_RANK`/`PMI_SIZE`, the job id a hash of `PMIX_NAMESPACE`,
/// `OMPI_MCA_ess_base_jobid` or `SLURM_JOB_ID`.`SLURM_STEP_ID`; rank 0 of 1 without a launcher.
job_info job_from_environment();
/// Replaces the job of the active session (no effect without one). The strata::net endpoint
/// calls it once MPI has started, with MPI's rank and size and a measured clock offset; without
/// an endpoint the session keeps what `start()` read from the environment.
void set_job(const job_info& job);
/// The job of the active session (`job_from_environment()` as read by `start()`, or what
/// `set_job` gave since).
job_info job();

/// Options for one recording session.
struct options {
  std::string file{};            ///< Where `stop()` writes the trace.
  std::size_t event_limit = 0;   ///< 0: unbounded; otherwise events past the limit are dropped and counted.
};

/// Starts recording (returns false, doing nothing, if a session is already active or tracing
/// is compiled out).
bool start(const options& opts);
/// What `stop()` wrote.
struct summary {
  std::string file{};
  std::size_t events = 0;
  std::size_t dropped = 0;  ///< Events lost to the event limit.
  bool written = false;
  std::string error{};      ///< Non-empty when the file could not be written.
};
/// Stops recording and writes the file (`FILE.rank<r>` for a rank of a world of more than one,
/// see `job_info`). Call only when no thread records any more (the actor
/// system calls it after joining its threads). Returns what was written.
summary stop();
/// True when a session is active (started and not yet stopped).
bool active() noexcept;

}  // namespace strata::trace
