#pragma once
/// \file
/// What a trace says, assembled from its events: actors with their handler slices and mailbox
/// depth over time, device stream work, message flows (send -> handling), drops and pipeline
/// tags. Every view of strata-trace (summary, export, timeline, dot) reads this model.
///
/// Pipeline tag convention (docs/trace-tools.md): a `tag` event named
///   - `pipeline.stage`, value = stage index: marks the recording actor as a pipeline stage;
///   - `pipeline.device`, value = device key ((kind << 16) | ordinal): the device the stage
///     actor's work runs on; stages with the same key (on one rank) share that device;
///   - `pipeline.forward` / `pipeline.backward`, value = micro-batch: recorded inside a handler,
///     marks that handler slice as forward / backward work of that micro-batch;
///   - `pipeline.ideal_bubble_ppm`, value = the schedule's ideal bubble in millionths.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/trace_tools/trace_reader.hpp"

namespace strata::trace_tools {

/// The pipeline role of a handler slice, from `pipeline.forward` / `pipeline.backward` tags.
enum class pipeline_phase : std::uint8_t { none, forward, backward };

/// One handled message on an actor: handler_begin .. handler_end.
struct handler_slice {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t msg = 0;
  std::uint32_t type = 0;
  std::uint64_t sender = 0;
  bool threw = false;
  bool unfinished = false;  ///< No handler_end before the trace ended; closed at the trace end.
  pipeline_phase phase = pipeline_phase::none;
  std::int64_t micro_batch = -1;
};

/// What a piece of stage device work is, read from its name (docs/trace-format.md, "Device
/// work of pipeline stages"): `weight` is a deferred weight gradient, `other` a name of no phase.
enum class work_phase : std::uint8_t { other, forward, backward, weight, update };
inline constexpr std::size_t work_phases = 5;
/// "forward", "backward", "weight", "update" or "other".
const char* work_phase_name(work_phase p);

/// A device work name taken apart: "forward mb 3 chunk 1" is forward work of micro-batch 3,
/// time chunk 1; the plain "forward" (the LM's older traces) has no micro-batch or chunk (-1).
struct work_name_parts {
  work_phase phase = work_phase::other;
  std::int64_t micro_batch = -1;
  std::int64_t chunk = -1;
};
/// Parses "PHASE", "PHASE mb M" or "PHASE mb M chunk C" (PHASE one of forward, backward,
/// weight, update; M and C decimal); any other name is phase `other` with no micro-batch.
work_name_parts parse_work_name(std::string_view name);

/// One piece of device work on a stream: device_begin .. device_end.
struct device_slice {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t work = 0;
  std::uint32_t name = 0;  ///< String id of the work name.
  bool unfinished = false;
  work_phase phase = work_phase::other;  ///< From the name (parse_work_name).
  std::int64_t micro_batch = -1;         ///< From the name; -1: not named.
  std::int64_t chunk = -1;               ///< From the name; -1: not named.
};

/// One side of a transfer between ranks: transfer_begin .. transfer_end (docs/trace-format.md).
struct transfer_slice {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t rank = 0;   ///< The rank that recorded it.
  std::uint64_t peer = 0;   ///< The other rank (0 for a collective).
  std::uint64_t key = 0;    ///< MPI tag (the same on both ranks) or the collective's number.
  trace::transfer what = trace::transfer::send;
  std::uint64_t bytes = 0;
  bool unfinished = false;  ///< No transfer_end before the trace ended.
  std::uint64_t duration() const { return end - begin; }
};
/// "send", "receive", "allreduce" (or "transfer N" for a value this version does not know).
std::string transfer_name(trace::transfer what);

/// Mailbox depth after an event at `ts`.
struct depth_sample {
  std::uint64_t ts = 0;
  std::uint32_t depth = 0;
};

struct actor_info {
  std::uint64_t id = 0;
  std::string name;                       ///< From the spawn event; "actor-<id>" if none was recorded.
  bool spawn_seen = false;
  std::uint64_t first_ts = 0;             ///< Spawn, or the first event about the actor.
  std::optional<std::uint64_t> exit_ts;
  std::string exit_reason;
  std::uint32_t exit_code = 0;
  std::vector<handler_slice> slices;      ///< In time order; never overlapping.
  std::vector<depth_sample> depth;        ///< Every change of the mailbox depth.
  std::uint64_t enqueued = 0;             ///< Messages put into its mailbox.
  std::uint64_t handled = 0;              ///< Handler slices.
  std::uint64_t sent = 0;                 ///< Messages it sent.
  std::uint64_t unhandled = 0;            ///< Messages it had no handler for.
  std::int64_t pipeline_stage = -1;       ///< From a `pipeline.stage` tag.
  std::optional<std::uint32_t> device_key;  ///< From a `pipeline.device` tag: (kind << 16) | ordinal.
  std::int64_t rank = -1;                 ///< From a `placement` event (merged traces); -1: unknown.
  std::uint64_t lifetime_end(std::uint64_t trace_end) const { return exit_ts ? *exit_ts : trace_end; }
};

/// A send whose handling is in the trace: the two ends of a message-flow arrow.
struct message_flow {
  std::uint64_t msg = 0;
  std::uint32_t type = 0;
  std::uint64_t send_ts = 0;
  std::uint64_t sender = 0;       ///< 0: sent from outside any actor.
  std::uint64_t receiver = 0;
  std::uint64_t enqueue_ts = 0;   ///< 0 when no enqueue was recorded.
  std::uint64_t handle_ts = 0;    ///< handler_begin.
};

struct send_record {
  std::uint64_t ts = 0;
  std::uint64_t sender = 0;
  std::uint64_t receiver = 0;
  std::uint32_t type = 0;
  std::int64_t sender_slice = -1;  ///< Index into the sender's slices of the handler it sent from; -1: outside any.
  bool remote = false;             ///< A `remote_send`: the receiver is on another rank.
};

struct tag_record {
  std::uint64_t ts = 0;
  std::uint64_t actor = 0;
  std::string name;
  std::uint32_t value = 0;
};

/// Drops and unhandled messages, by reason.
struct drop_record {
  std::uint64_t ts = 0;
  std::uint64_t receiver = 0;
  std::uint64_t sender = 0;
  std::uint32_t type = 0;
  std::uint32_t reason = 0;  ///< errc
};

/// Device tracks of pipeline stages (docs/trace-tools.md): the device work of stage s is
/// recorded on device id `stage_device_base + s` (what the pipeline stage actor and
/// actors/lm/src/pipeline.cpp record), named as parse_work_name reads.
inline constexpr std::uint64_t stage_device_base = 1'000'000'000;
/// Stage index of a device track id, or -1 when the id is not a stage's device track.
/// In a merged trace a device id carries its rank in the high 32 bits (docs/trace-format.md).
inline std::int64_t stage_of_device(std::uint64_t device) {
  device &= 0xffffffffu;
  return device >= stage_device_base && device - stage_device_base < (1u << 20)
             ? static_cast<std::int64_t>(device - stage_device_base)
             : -1;
}

/// The name of a `pipeline.device` key: "cpu:0", "cuda:1", "sim:0" ("kind K:N" for a kind
/// this version does not know).
std::string device_key_name(std::uint32_t key);

struct trace_model {
  const trace_file* file = nullptr;
  std::uint64_t begin = 0;  ///< First event.
  std::uint64_t end = 0;    ///< Last event.
  std::map<std::uint64_t, actor_info> actors;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<device_slice>> streams;  ///< (device, stream)
  std::vector<send_record> sends;                          ///< Every send, in time order.
  std::map<std::uint64_t, std::size_t> send_by_msg;        ///< msg id -> index into `sends`
  std::vector<message_flow> flows;                         ///< Sends whose handler_begin is in the trace.
  std::vector<drop_record> drops;
  std::vector<tag_record> tags;
  std::vector<transfer_slice> transfers;                   ///< Transfers between ranks, by begin time.
  /// Merged traces: each send joined to the receive of its tag on the other rank (indices into
  /// `transfers`; a tag reused: in turn), and how many sends have no receive.
  std::vector<std::pair<std::size_t, std::size_t>> transfer_links;
  std::uint64_t unlinked_sends = 0;
  std::uint64_t unknown_events = 0;                        ///< Kinds this reader does not know (skipped).
  std::uint64_t remote_sends = 0;                          ///< `remote_send` events: messages to other ranks.
  std::uint64_t remote_receipts = 0;                       ///< `remote_recv` events: messages from other ranks.
  std::optional<double> ideal_bubble;                      ///< From `pipeline.ideal_bubble_ppm`.

  std::uint64_t span() const { return end - begin; }
  /// "name" of an actor id ("external" for 0).
  std::string actor_name(std::uint64_t id) const;
  /// The rank a device id belongs to in a merged trace (its high 32 bits), -1 in others.
  std::int64_t device_rank(std::uint64_t device) const;
  /// The device id as its rank recorded it (the low 32 bits in a merged trace).
  std::uint64_t local_device(std::uint64_t device) const;
};

/// What a piece of the critical path is (docs/trace-tools.md, "critical path").
enum class path_kind : std::uint8_t { handler, wait, device, other };
inline constexpr std::size_t path_kinds = 4;
/// "handler", "wait", "device" or "other".
const char* path_kind_name(path_kind k);

/// One piece of the critical path: [begin, end) on one track.
struct path_segment {
  path_kind kind = path_kind::other;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t actor = 0;    ///< handler: the handling actor; wait: the receiver; device/other: the stage actor (0 if none).
  std::uint32_t type = 0;     ///< handler / wait: message type id.
  std::uint64_t msg = 0;      ///< handler / wait: message id; device: work id.
  std::uint64_t device = 0;   ///< device: the device track id.
  std::uint64_t stream = 0;   ///< device: the stream id.
  std::uint32_t work_name = 0;  ///< device: string id of the work name.
  std::uint64_t duration() const { return end - begin; }
};

/// The longest causal chain through the trace that ends at the end of the last handler slice.
struct critical_path {
  std::vector<path_segment> segments;  ///< In time order, never overlapping (adjacent ones touch).
  std::uint64_t begin = 0;             ///< Start of the first segment.
  std::uint64_t end = 0;               ///< End of the last handled message.
  std::uint64_t by_kind[path_kinds] = {0, 0, 0, 0};  ///< Summed durations per path_kind.
  std::uint64_t total() const { return end - begin; }
  bool empty() const { return segments.empty(); }
};

/// Walks the causes back from the end of the last handler slice (docs/trace-tools.md):
/// a handler slice is caused by the send of its message (send .. handler_begin is mailbox
/// wait), the send by the handler slice that contains it on the sender's track; on a pipeline
/// stage with a device track (device 1'000'000'000 + stage), device work that ended after
/// the message was sent (after the actor's previous slice began, when the message came from
/// outside any handler) and before the point reached is the cause instead, and that work
/// follows the latest handler slice of the stage actor that began before it. Gaps are "other".
critical_path compute_critical_path(const trace_model& m);

/// Builds the model from a parsed trace. The trace must outlive the model.
trace_model build_model(const trace_file& file);

/// Nearest-rank percentile (p in [0,1]) of `values`, which it sorts; 0 for no values.
std::uint64_t percentile(std::vector<std::uint64_t>& values, double p);

}  // namespace strata::trace_tools
