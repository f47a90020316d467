#include "strata/trace_tools/trace_reader.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

#include "strata/error.hpp"

namespace strata::trace_tools {

using trace::event_kind;

namespace {

/// A cursor over the file's bytes that never reads past the end.
class byte_cursor {
public:
  explicit byte_cursor(std::string_view bytes) : bytes_(bytes) {}
  std::size_t remaining() const noexcept { return bytes_.size() - pos_; }
  std::size_t position() const noexcept { return pos_; }
  template <class T>
  bool take(T& out) noexcept {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(&out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool take_string(std::size_t len, std::string& out) {
    if (remaining() < len) return false;
    out.assign(bytes_.data() + pos_, len);
    pos_ += len;
    return true;
  }
  const char* here() const noexcept { return bytes_.data() + pos_; }

private:
  std::string_view bytes_;
  std::size_t pos_ = 0;
};

}  // namespace

bool is_message_kind(std::uint8_t k) {
  switch (static_cast<event_kind>(k)) {
    case event_kind::send:
    case event_kind::enqueue:
    case event_kind::handler_begin:
    case event_kind::handler_end:
    case event_kind::drop:
    case event_kind::unhandled:
    case event_kind::timer_fire:
    case event_kind::remote_send:
    case event_kind::remote_recv:
      return true;
    default:
      return false;
  }
}

namespace {

read_result fail(const std::string& name, const std::string& what) {
  read_result r;
  r.error = name + ": " + what;
  return r;
}

/// Reads one length-prefixed table; false (with `why`) when it does not fit in the file.
bool read_table(byte_cursor& in, std::uint32_t count, const char* what, std::vector<std::string>& out,
                std::string& why) {
  // Each entry takes at least its 4-byte length: a count beyond that is corrupt, and checking it
  // first bounds the reservation by the file size.
  if (count > in.remaining() / 4) {
    why = std::string("the ") + what + " table claims " + std::to_string(count) + " entries but only " +
          std::to_string(in.remaining()) + " bytes follow the header (the file is truncated or corrupt)";
    return false;
  }
  out.reserve(out.size() + count);
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint32_t len = 0;
    if (!in.take(len)) {
      why = std::string(what) + " " + std::to_string(i) + " of " + std::to_string(count) +
            " is cut off (the file is truncated)";
      return false;
    }
    std::string s;
    if (!in.take_string(len, s)) {
      why = std::string(what) + " " + std::to_string(i) + " claims " + std::to_string(len) +
            " bytes but only " + std::to_string(in.remaining()) +
            " remain in the file (the file is truncated or corrupt)";
      return false;
    }
    out.push_back(std::move(s));
  }
  return true;
}

}  // namespace

const std::string& trace_file::string_at(std::uint64_t id) const {
  static const std::string empty;
  return id < strings.size() ? strings[static_cast<std::size_t>(id)] : empty;
}

std::string trace_file::type_name(std::uint32_t id) const {
  if (id < types.size() && id != 0) return types[id];
  if (id == 0) return "(untyped)";
  return "?";
}

std::string kind_name(std::uint8_t kind) {
  switch (static_cast<event_kind>(kind)) {
    case event_kind::spawn: return "spawn";
    case event_kind::exit: return "exit";
    case event_kind::send: return "send";
    case event_kind::enqueue: return "enqueue";
    case event_kind::handler_begin: return "handler_begin";
    case event_kind::handler_end: return "handler_end";
    case event_kind::drop: return "drop";
    case event_kind::unhandled: return "unhandled";
    case event_kind::timer_fire: return "timer_fire";
    case event_kind::device_begin: return "device_begin";
    case event_kind::device_end: return "device_end";
    case event_kind::tag: return "tag";
    case event_kind::remote_send: return "remote_send";
    case event_kind::remote_recv: return "remote_recv";
    case event_kind::placement: return "placement";
    case event_kind::transfer_begin: return "transfer_begin";
    case event_kind::transfer_end: return "transfer_end";
  }
  return "kind " + std::to_string(kind);
}

std::string errc_name(std::uint32_t code) {
  if (code > static_cast<std::uint32_t>(errc::runtime_failure)) return "errc " + std::to_string(code);
  return to_string(static_cast<errc>(code));
}

namespace {

/// The counts a header announces.
struct header_counts {
  std::uint32_t strings = 0, types = 0;
  std::uint64_t events = 0;
};

/// The header after the magic bytes into `t` and `n`; false (with `why`) for a version this
/// reader does not know, a truncated or inconsistent header. `size`: the file's.
bool read_header(byte_cursor& in, std::size_t size, trace_file& t, header_counts& n, std::string& why) {
  if (!in.take(t.version)) {
    why = "truncated header (" + std::to_string(size) + " bytes; a version-1 header has " + std::to_string(header_size) + ")";
    return false;
  }
  if (t.version != 1 && t.version != 2) {
    why = "trace format version " + std::to_string(t.version) + " is not supported (this strata-trace reads versions 1 and 2)";
    return false;
  }
  const std::size_t header = t.version == 1 ? header_size : header_size_v2;
  if (size < header) {
    why = "truncated header (" + std::to_string(size) + " bytes; a version-" + std::to_string(t.version) + " header has " +
          std::to_string(header) + ")";
    return false;
  }
  std::uint32_t record_size = 0;
  in.take(record_size);
  in.take(t.start_unix_ns);
  in.take(n.events);
  in.take(t.dropped);
  in.take(n.strings);
  in.take(n.types);
  if (t.version == 2) {
    in.take(t.rank);
    in.take(t.world_size);
    in.take(t.job_id);
    in.take(t.clock_offset_ns);
    in.take(t.clock_uncertainty_ns);
    if (t.rank != all_ranks && t.world_size != 0 && t.rank >= t.world_size) {
      why = "the header names rank " + std::to_string(t.rank) + " of a world of " + std::to_string(t.world_size) +
            " ranks (the file is corrupt)";
      return false;
    }
  }
  if (record_size != sizeof(trace::record)) {
    why = "the header gives an event record size of " + std::to_string(record_size) + " bytes; records are " +
          std::to_string(sizeof(trace::record));
    return false;
  }
  return true;
}

/// The `count` event records that end the file; false (with `why`) when the file holds fewer or
/// more bytes than they take.
bool read_events(byte_cursor& in, std::uint64_t count, trace_file& t, std::string& why) {
  if (count > in.remaining() / sizeof(trace::record)) {
    why = "truncated: the header announces " + std::to_string(count) + " events (" +
          (count > UINT64_MAX / sizeof(trace::record) ? std::string("more than the address space")
                                                      : std::to_string(count * sizeof(trace::record)) + " bytes") +
          ") but only " + std::to_string(in.remaining()) + " bytes follow the tables";
    return false;
  }
  const std::size_t event_bytes = static_cast<std::size_t>(count) * sizeof(trace::record);
  if (in.remaining() != event_bytes) {
    why = std::to_string(in.remaining() - event_bytes) + " bytes of unexpected data follow the " + std::to_string(count) +
          " events (the event count or the tables are corrupt)";
    return false;
  }
  t.events.resize(static_cast<std::size_t>(count));
  if (event_bytes != 0) std::memcpy(t.events.data(), in.here(), event_bytes);
  return true;
}

/// False (with `why`) unless the events are sorted by time and every string and message type
/// they name is in the tables.
bool check_events(const trace_file& t, std::string& why) {
  const std::uint64_t nstrings = t.strings.size();
  const std::uint64_t ntypes = t.types.size();
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    if (i > 0 && e.ts_ns < t.events[i - 1].ts_ns) {
      why = "event " + std::to_string(i) + " is earlier than the event before it (events must be sorted by time; the "
            "file is corrupt)";
      return false;
    }
    auto bad_string = [&](std::uint64_t id) {
      why = "event " + std::to_string(i) + " (" + kind_name(e.kind) + ") refers to string " + std::to_string(id) +
            " but the string table has " + std::to_string(nstrings) + " entries (the file is corrupt)";
      return false;
    };
    switch (static_cast<event_kind>(e.kind)) {
      case event_kind::spawn:
      case event_kind::device_begin:
      case event_kind::device_end:
        if (e.arg32 >= nstrings) return bad_string(e.arg32);
        break;
      case event_kind::exit:
      case event_kind::tag:
        if (e.msg >= nstrings) return bad_string(e.msg);
        break;
      default:
        break;
    }
    if (is_message_kind(e.kind) && e.type != 0xffff && e.type >= ntypes) {
      why = "event " + std::to_string(i) + " (" + kind_name(e.kind) + ") has message type " + std::to_string(e.type) +
            " but the type table has " + std::to_string(ntypes - 1) + " entries (the file is corrupt)";
      return false;
    }
  }
  return true;
}

}  // namespace

read_result parse_trace(std::string_view bytes, const std::string& name) {
  if (bytes.empty()) return fail(name, "the file is empty (expected a strata trace starting with \"STRATATR\")");
  if (bytes.size() < 8 || bytes.substr(0, 8) != std::string_view("STRATATR", 8))
    return fail(name, "not a strata trace (the file does not start with the magic bytes \"STRATATR\")");
  byte_cursor in(bytes);
  char magic[8];
  in.take(magic);
  read_result r;
  trace_file& t = r.trace;
  t.name = name;
  header_counts n;
  std::string why;
  if (!read_header(in, bytes.size(), t, n, why)) return fail(name, why);
  if (!read_table(in, n.strings, "string", t.strings, why)) return fail(name, why);
  t.types.emplace_back();
  if (!read_table(in, n.types, "message type", t.types, why)) return fail(name, why);
  if (!read_events(in, n.events, t, why)) return fail(name, why);
  if (!check_events(t, why)) return fail(name, why);
  return r;
}

read_result read_trace(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return fail(path, "no such file");
    return fail(path, std::string("cannot access the file (") + std::strerror(errno) + ")");
  }
  if (S_ISDIR(st.st_mode)) return fail(path, "is a directory, not a trace file");
  if (!S_ISREG(st.st_mode)) return fail(path, "is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(path, std::string("cannot open the file (") + std::strerror(errno) + ")");
  std::string bytes;
  bytes.resize(static_cast<std::size_t>(st.st_size));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (static_cast<std::size_t>(in.gcount()) != bytes.size())
    return fail(path, "could not read the whole file (it changed while being read?)");
  return parse_trace(bytes, path);
}

}  // namespace strata::trace_tools
