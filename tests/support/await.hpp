#pragma once
// The answer of an asynchronous call (a kvstore client's future) inside a Boost.Test case: the
// case fails, instead of hanging, when no answer comes within `patience`.

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>

namespace strata::test {

template <class T>
T await(std::future<T>& f, std::chrono::seconds patience = std::chrono::seconds(60)) {
  if (f.wait_for(patience) != std::future_status::ready) BOOST_FAIL("timed out waiting for the store");
  return f.get();
}

template <class T>
T await(std::future<T>&& f, std::chrono::seconds patience = std::chrono::seconds(60)) {
  return await(f, patience);
}

}  // namespace strata::test
