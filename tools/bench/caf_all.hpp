#pragma once
// <caf/all.hpp> for the CAF 0.17 twins of the messaging benchmarks.

// CAF's headers are clean under -Wall -Wextra when they come from /usr/include
// (a system directory); these only matter if they are reached through a
// non-system include path under the project's stricter warning set.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
#pragma GCC diagnostic ignored "-Wdeprecated"
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wnull-dereference"
#pragma GCC diagnostic ignored "-Wcast-align"
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <caf/all.hpp>
#pragma GCC diagnostic pop
