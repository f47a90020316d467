// Implementation test of the kvstore's grouping of a push's values by key (group_by_key, private
// header actors/kvstore/src/merge.hpp): a sharded store pushes one chunk key per chunk, so the
// grouping must cost k log k key comparisons for k values, not k^2 (a linear search over the
// groups took 68 s for a push of 500k chunks). Counted, not timed.

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "merge.hpp"

namespace kvstore_grouping_test {

/// Orders keys as kvstore::key does, counting the comparisons.
struct counting_less {
  std::shared_ptr<std::uint64_t> count = std::make_shared<std::uint64_t>(0);
  bool operator()(const strata::kvstore::key& a, const strata::kvstore::key& b) const {
    ++*count;
    return a < b;
  }
};

BOOST_AUTO_TEST_SUITE(kvstore_grouping)

BOOST_AUTO_TEST_CASE(grouping_k_values_by_key_costs_k_log_k_comparisons_and_keeps_first_appearance_order) {
  std::mt19937 rng(20261203);
  for (std::size_t k : {1'000u, 200'000u}) {
    BOOST_TEST_CONTEXT("k = " << k) {
      std::vector<strata::kvstore::key> keys;
      std::vector<std::int64_t> raw;
      std::vector<int> values;
      for (std::size_t i = 0; i < k; ++i) {
        raw.push_back(static_cast<std::int64_t>(rng() % (k / 2 + 1)));  // about half the keys repeat
        keys.emplace_back(raw.back());
        values.push_back(static_cast<int>(rng()));
      }
      counting_less less;
      const auto groups = strata::kvstore::internal::group_by_key(keys, values, less);
      // Reference: values per key and the order of first appearance, from integer keys.
      std::map<std::int64_t, std::vector<int>> by_key;
      std::vector<std::int64_t> first_seen;
      for (std::size_t i = 0; i < k; ++i) {
        auto& group = by_key[raw[i]];
        if (group.empty()) first_seen.push_back(raw[i]);
        group.push_back(values[i]);
      }
      BOOST_REQUIRE(groups.size() == first_seen.size());
      std::size_t wrong = 0;
      for (std::size_t g = 0; g < groups.size(); ++g)
        if (std::get<std::int64_t>(groups[g].first.value()) != first_seen[g] || groups[g].second != by_key[first_seen[g]])
          ++wrong;
      BOOST_TEST(wrong == 0u);
      BOOST_TEST(*less.count >= k - 1);  // every key was placed by comparing it
      // A balanced tree's lookup compares at most about 2 log2(n) times; a linear search over the
      // groups would compare about k * groups / 2 times (10^10 for k = 200 000).
      const double bound = 4.0 * static_cast<double>(k) * std::log2(static_cast<double>(k));
      BOOST_TEST(static_cast<double>(*less.count) <= bound);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_grouping_test
