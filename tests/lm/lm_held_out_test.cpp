// Held-out files (--valid, --test) in PTB's layout, a word-level run end to end on made-up
// PTB-style files (tests/fixtures/ptb_tiny), and the sample a run ends with.

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "strata/lm/data.hpp"
#include "strata/lm/trainer.hpp"

namespace lm_held_out_test {

namespace fs = std::filesystem;
namespace lm = strata::lm;

const fs::path ptb = fs::path(STRATA_TEST_FIXTURES_DIR) / "ptb_tiny";

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

lm::trainer_options small_word_run() {
  lm::trainer_options o;
  o.tokens = "word";
  o.corpus = (ptb / "train.txt").string();
  o.valid = (ptb / "valid.txt").string();
  o.test = (ptb / "test.txt").string();
  o.devices = "cpu:2";
  o.layers = 2;
  o.hidden = 32;
  o.embed = 16;
  o.batch = 8;
  o.seq = 10;
  o.steps = 60;
  o.lr = 0.01;
  o.lr_schedule = "constant";
  o.dropout = 0.1;
  o.sample_length = 12;
  return o;
}

BOOST_AUTO_TEST_SUITE(lm_held_out)

BOOST_AUTO_TEST_CASE(a_word_level_run_on_ptb_style_files_validates_and_tests_on_them_and_learns) {
  auto o = small_word_run();
  const auto r = lm::train(o);
  // Every token of each file: words plus one <eos> per line, 10 columns of whole rows.
  const auto count = [](const fs::path& p) { return lm::tokenize(lm::token_kind::words, read(p)).size(); };
  const std::size_t valid = count(ptb / "valid.txt"), test = count(ptb / "test.txt");
  BOOST_TEST(r.setup.validation_tokens == valid);
  BOOST_TEST(r.setup.train_tokens == count(ptb / "train.txt"));  // the whole corpus trains
  BOOST_TEST(r.validation.tokens == (valid / 10 - 1) * 10);
  BOOST_REQUIRE(r.test.has_value());
  BOOST_TEST(r.test->tokens == (test / 10 - 1) * 10);
  // Learned: far below a uniform guess over the vocabulary (and the unigram level, ~3.3 nats).
  const double uniform = std::log(static_cast<double>(r.setup.model.vocab));
  BOOST_TEST(r.test->loss < uniform - 1.5);
  BOOST_TEST(std::abs(r.test->loss - r.validation.loss) < 0.3);  // the same made-up grammar
  // The sample: the prompt is the validation text's first 4 tokens, then 12 sampled words.
  BOOST_TEST(r.sample_prompt == "a spokesman expects profits");
  std::size_t words = 0;
  for (const auto& w : lm::tokenize(lm::token_kind::words, r.sample))
    if (w != "<eos>") ++words;
  BOOST_TEST(words >= 6u);
  BOOST_TEST(lm::train(o).sample == r.sample);  // seeded
}

BOOST_AUTO_TEST_CASE(held_out_files_in_char_mode_must_use_the_corpus_characters) {
  const fs::path dir = fs::temp_directory_path() / ("lm_held_out_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "valid.txt") << "the company said\nits shares fell \xc3\xa9" "a\n";
  auto o = small_word_run();
  o.tokens = "char";
  o.valid = (dir / "valid.txt").string();
  BOOST_CHECK_EXCEPTION(lm::train(o), lm::input_error, [&](const lm::input_error& e) {
    return std::string(e.what()) == "--valid '" + o.valid + "' holds the character '\xc3\xa9' (U+00E9), which the training text does not";
  });
  o.valid = (ptb / "valid.txt").string();
  o.test = (dir / "missing.txt").string();
  BOOST_CHECK_EXCEPTION(lm::train(o), lm::input_error,
                        [](const lm::input_error& e) { return std::string(e.what()).rfind("--test: ", 0) == 0; });
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lm_held_out_test
