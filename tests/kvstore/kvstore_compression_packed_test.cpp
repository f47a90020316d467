// Gradient compression's packed codes (what a distributed worker sends): compress_packed then
// decompress gives the values and residuals of the unpacked rule (compress) bit for bit, on
// random data and lengths that are not multiples of a word, in MXNet's byte layout.

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "strata/kvstore/compression.hpp"

namespace kvstore_compression_packed_test {

namespace kv = strata::kvstore;

struct setting {
  kv::compression_type type;
  float threshold;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The codes of one pass over `grad` from zero residuals.
std::vector<std::uint32_t> codes_of(kv::compression_type type, float threshold, const std::vector<float>& grad) {
  std::vector<float> residual(grad.size(), 0.0f);
  std::vector<std::uint32_t> codes(kv::packed_words(type, grad.size()), 0xffffffffu);
  kv::compress_packed(type, threshold, grad.data(), residual.data(), codes.data(), grad.size());
  return codes;
}

std::vector<unsigned char> bytes_of(const std::vector<std::uint32_t>& codes) {
  std::vector<unsigned char> out(codes.size() * sizeof(std::uint32_t));
  std::memcpy(out.data(), codes.data(), out.size());
  return out;
}

BOOST_AUTO_TEST_SUITE(kvstore_compression_packed)

BOOST_AUTO_TEST_CASE(packed_codes_round_trip_to_the_unpacked_rule_bit_for_bit_on_random_data_of_odd_lengths) {
  std::mt19937 rng(std::random_device{}());
  const std::uint32_t seed = rng();
  BOOST_TEST_MESSAGE("seed " << seed);
  rng.seed(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<setting> settings{{kv::compression_type::two_bit, 0.5f},
                                      {kv::compression_type::two_bit, 1.7f},
                                      {kv::compression_type::one_bit, 0.0f},
                                      {kv::compression_type::one_bit, 0.3f},
                                      {kv::compression_type::none, 0.5f}};
  for (const auto& s : settings)
    for (std::size_t n : {1u, 7u, 15u, 16u, 17u, 31u, 33u, 1000u, 1001u, 4099u}) {
      std::vector<float> unpacked_residual(n, 0.0f), packed_residual(n, 0.0f);
      for (int round = 0; round < 5; ++round) {  // the residuals carry over, as on a worker
        std::vector<float> grad(n);
        for (auto& g : grad) g = normal(rng) * 0.6f;
        std::vector<float> sent(n), unpacked(n);
        kv::compress(s.type, s.threshold, grad.data(), unpacked_residual.data(), sent.data(), n);
        std::vector<std::uint32_t> codes(kv::packed_words(s.type, n), 0xffffffffu);  // no stale bits survive
        kv::compress_packed(s.type, s.threshold, grad.data(), packed_residual.data(), codes.data(), n);
        kv::decompress(s.type, s.threshold, codes.data(), unpacked.data(), n);
        BOOST_TEST(same_bits(unpacked, sent), "type " << int(s.type) << " n " << n << " round " << round);
        BOOST_TEST(same_bits(packed_residual, unpacked_residual), "residual, n " << n << " round " << round);
        if (s.type != kv::compression_type::none) {
          // Bits past the last element are 0: the words are fully determined by the values.
          const std::size_t bits = s.type == kv::compression_type::two_bit ? 2 : 1;
          const auto bytes = bytes_of(codes);
          for (std::size_t b = n * bits; b < bytes.size() * 8; ++b)
            BOOST_TEST(((bytes[b / 8] >> (7 - b % 8)) & 1) == 0, "bit " << b << " past n " << n);
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(packed_words_hold_16_elements_for_2bit_32_for_1bit_and_one_float_each_for_none) {
  BOOST_TEST(kv::packed_words(kv::compression_type::two_bit, 0) == 0u);
  BOOST_TEST(kv::packed_words(kv::compression_type::two_bit, 16) == 1u);
  BOOST_TEST(kv::packed_words(kv::compression_type::two_bit, 17) == 2u);
  BOOST_TEST(kv::packed_words(kv::compression_type::two_bit, 1000) == 63u);
  BOOST_TEST(kv::packed_words(kv::compression_type::one_bit, 32) == 1u);
  BOOST_TEST(kv::packed_words(kv::compression_type::one_bit, 1000) == 32u);
  BOOST_TEST(kv::packed_words(kv::compression_type::none, 1000) == 1000u);
}

BOOST_AUTO_TEST_CASE(the_codes_are_laid_out_as_mxnet_packs_them) {
  // 2bit (t = 0.5): +t is 11, -t is 10, 0 is 00; element 0 in the top bits of byte 0.
  const auto two = bytes_of(codes_of(kv::compression_type::two_bit, 0.5f,
                                     {0.6f, -0.7f, 0.1f, 0.5f, 0.0f, 0.0f, 0.0f, -1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
                                      0.0f, 0.0f, 0.0f, 2.0f}));
  BOOST_REQUIRE(two.size() == 8u);
  BOOST_TEST(int(two[0]) == 0xE3);  // 11 10 00 11
  BOOST_TEST(int(two[1]) == 0x02);  // 00 00 00 10
  BOOST_TEST(int(two[4]) == 0xC0);  // element 16 opens the second word
  // 1bit (t = 0): +1 is a set bit, -1 a clear one, element 0 in bit 7 of byte 0.
  const auto one = bytes_of(codes_of(kv::compression_type::one_bit, 0.0f, {1, -1, -1, 1, 1, 1, 1, -1, 1}));
  BOOST_REQUIRE(one.size() == 4u);
  BOOST_TEST(int(one[0]) == 0x9E);  // 1001 1110
  BOOST_TEST(int(one[1]) == 0x80);
}

BOOST_AUTO_TEST_CASE(parse_compression_checks_the_type_and_the_threshold_with_one_sentence) {
  BOOST_TEST((kv::parse_compression("2bit", 0.5f).value() == kv::compression_type::two_bit));
  BOOST_TEST((kv::parse_compression("1bit", 0.0f).value() == kv::compression_type::one_bit));
  BOOST_TEST((kv::parse_compression("none", -3.0f).value() == kv::compression_type::none));
  auto unknown = kv::parse_compression("3bit", 0.5f);
  BOOST_REQUIRE(!unknown);
  BOOST_TEST(unknown.error().message().find("unknown type \"3bit\"") != std::string::npos);
  auto zero = kv::parse_compression("2bit", 0.0f);
  BOOST_REQUIRE(!zero);
  BOOST_TEST(zero.error().message().find("is not above 0") != std::string::npos);
  auto inf = kv::parse_compression("1bit", std::numeric_limits<float>::infinity());
  BOOST_REQUIRE(!inf);
  BOOST_TEST(inf.error().message().find("is not finite") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_compression_packed_test
