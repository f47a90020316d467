// Corpus reading, tokenisation, vocabularies and batching of the LSTM language model.

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/lm/data.hpp"

namespace lm_data_test {

using namespace strata::lm;
namespace fs = std::filesystem;

fs::path temp_file(const std::string& name, const std::string& bytes) {
  auto p = fs::temp_directory_path() / ("strata_lm_data_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

BOOST_AUTO_TEST_SUITE(lm_data)

BOOST_AUTO_TEST_CASE(a_char_vocabulary_round_trips_text_and_its_json) {
  const std::string text = "héllo wörld\nhello\n";
  auto v = vocabulary::build(token_kind::chars, text);
  BOOST_TEST(v.tokens().front() == "<unk>");
  BOOST_TEST(v.size() == 12u);  // <unk>, newline, space, d e h l o r w é ö
  auto ids = v.encode(text);
  BOOST_REQUIRE(ids.has_value());
  BOOST_TEST(ids->size() == 18u);  // code points, not bytes
  BOOST_TEST(v.decode(*ids) == text);
  auto j = nlohmann::json::parse(v.to_json());
  BOOST_TEST(j.size() == v.size());
  BOOST_TEST(j.at("é").get<int>() == v.id("é"));
  auto back = vocabulary::from_json(token_kind::chars, v.to_json());
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST((*back == v));
  auto unk = v.encode("hallo");  // 'a' is unknown: <unk>
  BOOST_REQUIRE(unk.has_value());
  BOOST_TEST((*unk)[1] == v.unknown_id());
}

BOOST_AUTO_TEST_CASE(a_word_vocabulary_keeps_the_most_frequent_words_and_line_ends) {
  const std::string text = "the cat sat\nthe cat\nthe end\n";
  auto v = vocabulary::build(token_kind::words, text, 4);  // <unk> + 3 most frequent
  BOOST_TEST(v.size() == 4u);
  BOOST_TEST(v.tokens()[1] == "<eos>");  // 3 times, ties broken lexicographically ("<eos>" < "the")
  BOOST_TEST(v.tokens()[2] == "the");
  BOOST_TEST(v.tokens()[3] == "cat");
  auto ids = v.encode("the dog sat\n");
  BOOST_REQUIRE(ids.has_value());
  BOOST_TEST((*ids == std::vector<std::int32_t>{2, 0, 0, 1}));
  BOOST_TEST(v.decode(*ids) == "the <unk> <unk>\n");
}

BOOST_AUTO_TEST_CASE(a_vocabulary_without_unk_rejects_an_unknown_token_by_name) {
  auto v = vocabulary::from_tokens(token_kind::chars, {"a", "b"});
  auto r = v.encode("abc");
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message().find("'c'") != std::string::npos);
  BOOST_CHECK_THROW(vocabulary::from_tokens(token_kind::chars, {"a", "a"}), std::invalid_argument);
  BOOST_TEST(!vocabulary::from_json(token_kind::chars, "{\"a\": 0, \"b\": 0}").has_value());
  BOOST_TEST(!vocabulary::from_json(token_kind::chars, "[1, 2]").has_value());
}

BOOST_AUTO_TEST_CASE(batching_matches_a_hand_computed_example) {
  std::vector<std::int32_t> stream(26);
  for (int i = 0; i < 26; ++i) stream[static_cast<std::size_t>(i)] = i;
  token_batches b(stream, 3, 2);  // 8 rows of 3 columns; tokens 24, 25 are dropped
  BOOST_TEST(b.rows() == 8u);
  BOOST_TEST(b.windows() == 3u);  // (8 - 1) / 2
  std::vector<std::int32_t> x, y;
  b.window(0, x, y);
  BOOST_TEST((x == std::vector<std::int32_t>{0, 8, 16, 1, 9, 17}));
  BOOST_TEST((y == std::vector<std::int32_t>{1, 9, 17, 2, 10, 18}));
  b.window(2, x, y);
  BOOST_TEST((x == std::vector<std::int32_t>{4, 12, 20, 5, 13, 21}));
  BOOST_TEST((y == std::vector<std::int32_t>{5, 13, 21, 6, 14, 22}));
  BOOST_CHECK_THROW(b.window(3, x, y), std::out_of_range);
  BOOST_CHECK_THROW(token_batches(stream, 13, 2), std::invalid_argument);  // 2 rows: no window of 2 + 1
}

BOOST_AUTO_TEST_CASE(an_empty_binary_or_missing_corpus_is_rejected_with_its_name) {
  auto check = [](const fs::path& p, const std::string& what) {
    try {
      (void)read_text_file(p.string());
      BOOST_FAIL("no error for " << p);
    } catch (const std::runtime_error& e) {
      BOOST_TEST_CONTEXT(e.what()) {
        BOOST_TEST(std::string(e.what()).find(p.string()) != std::string::npos);
        BOOST_TEST(std::string(e.what()).find(what) != std::string::npos);
      }
    }
  };
  auto empty = temp_file("empty", "");
  auto binary = temp_file("binary", std::string("ab\0cd", 5));
  auto latin1 = temp_file("latin1", "caf\xe9\n");
  check(empty, "is empty");
  check(binary, "binary");
  check(latin1, "not UTF-8");
  check(fs::temp_directory_path() / "strata_lm_no_such_file", "does not exist");
  for (auto& p : {empty, binary, latin1}) fs::remove(p);
}

BOOST_AUTO_TEST_CASE(the_validation_split_is_the_tail_and_starts_at_a_line) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + "\n";
  auto s = split_text(text, 0.05);
  BOOST_TEST(s.train + s.validation == text);
  BOOST_TEST(s.validation.substr(0, 5) == "line ");
  BOOST_TEST(s.validation.size() < text.size() / 10);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lm_data_test
