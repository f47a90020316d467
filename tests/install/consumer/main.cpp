#include <chrono>
#include <cstdio>

#include <strata/strata.hpp>

int main() {
  strata::actor_system sys;
  auto doubler = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int x) { return 2 * x; }}; });
  auto r = sys.request<int>(doubler, std::chrono::seconds(10), 21).get();
  if (!r || *r != 42) return 1;
  std::printf("consumer: strata answered %d\n", *r);
  return 0;
}
