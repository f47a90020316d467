#pragma once
// Message types of the strata::net tests, with their serialization.

#include <cstdint>
#include <string>
#include <vector>

#include "strata/net/serialize.hpp"

namespace nettest {

struct ping {
  std::int64_t seq = 0;
  std::string note;
};
template <class A>
void serialize(A& a, ping& m) {
  a(m.seq, m.note);
}

struct pong {
  std::int64_t seq = 0;
};
template <class A>
void serialize(A& a, pong& m) {
  a(m.seq);
}

struct add {
  std::int32_t a = 0;
  std::int32_t b = 0;
};
template <class A>
void serialize(A& ar, add& m) {
  ar(m.a, m.b);
}

/// The receiver keeps the request and never answers it.
struct hold_on {
  std::int32_t tag = 0;
};
template <class A>
void serialize(A& a, hold_on& m) {
  a(m.tag);
}

struct die {
  bool fail = false;
};
template <class A>
void serialize(A& a, die& m) {
  a(m.fail);
}

struct tensor_msg {
  std::vector<strata::tensor> tensors;
  std::string label;
};
template <class A>
void serialize(A& a, tensor_msg& m) {
  a(m.tensors, m.label);
}

struct start_burst {
  strata::actor_ref collector;
  std::int32_t count = 0;
};
template <class A>
void serialize(A& a, start_burst& m) {
  a(m.collector, m.count);
}

struct seq_msg {
  std::int32_t rank = 0;
  std::int32_t stream = 0;
  std::int32_t seq = 0;
};
template <class A>
void serialize(A& a, seq_msg& m) {
  a(m.rank, m.stream, m.seq);
}

/// Where an actor handled message `seq`: on the communication thread (inline) or not.
struct where_ran {
  std::int64_t seq = 0;
  bool inline_run = false;
};
template <class A>
void serialize(A& a, where_ran& m) {
  a(m.seq, m.inline_run);
}

/// No serialization: must not cross ranks.
struct opaque {
  int x = 0;
};

}  // namespace nettest

STRATA_NET_DECLARE(nettest::ping, nettest::pong, nettest::add, nettest::hold_on, nettest::die, nettest::tensor_msg,
                   nettest::start_burst, nettest::seq_msg, nettest::where_ran);
