// The text a run trains and validates on: the corpus (or --valid) read and tokenised, its
// vocabulary, the training windows, and the held-out files (--valid, --test).
#include "trainer_setup.hpp"

#include <cstdio>
#include <string>
#include <utility>

namespace strata::lm::detail {

namespace {

/// The code point of the one-character UTF-8 string `s`, as 4 or more hex digits.
std::string code_point_hex(const std::string& s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  char32_t cp = b(0);
  if (s.size() == 2) cp = ((b(0) & 0x1Fu) << 6) | (b(1) & 0x3Fu);
  if (s.size() == 3) cp = ((b(0) & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
  if (s.size() == 4) cp = ((b(0) & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04X", static_cast<unsigned>(cp));
  return buf;
}

}  // namespace

std::vector<std::int32_t> held_out_ids(const char* flag, const std::string& path, const vocabulary& vocab) {
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const std::exception& e) {
    throw input_error(std::string(flag) + ": " + e.what());
  }
  // Characters: a held-out text must use the training text's characters (an unseen one would
  // only measure <unk>). Words: unseen words are <unk>, as in PTB.
  std::vector<std::string> tokens;
  try {
    tokens = tokenize(vocab.kind(), text);
  } catch (const std::exception& e) {
    throw input_error(std::string(flag) + " '" + path + "': " + e.what());
  }
  std::vector<std::int32_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) {
    const std::int32_t id = vocab.id(t);
    if (id < 0 && vocab.kind() == token_kind::chars)
      throw input_error(std::string(flag) + " '" + path + "' holds the character '" + t + "' (U+" + code_point_hex(t) +
                        "), which the training text does not");
    ids.push_back(id < 0 ? vocab.unknown_id() : id);
  }
  if (ids.size() < 2) throw input_error(std::string(flag) + " '" + path + "' holds fewer than two tokens");
  return ids;
}

void open_data(const trainer_options& o, prepared_run& run) {
  training_setup& su = run.setup;
  std::string text;
  try {
    if (o.corpus.empty()) text = read_default_corpus(su.source);
    else text = read_text_file(o.corpus), su.source = o.corpus;
  } catch (const std::exception& e) {
    throw input_error(e.what());
  }
  // --valid: the whole corpus trains and the file validates (PTB's train/valid/test layout).
  auto split = o.valid.empty() ? split_text(text, o.val_fraction) : text_split{std::move(text), {}};
  text.clear();
  run.vocab = vocabulary::build(su.tokens, split.train, su.tokens == token_kind::words ? o.vocab_size : 0);
  auto train_ids = run.vocab.encode(split.train);
  if (!train_ids) throw input_error("the corpus cannot be tokenised");
  std::vector<std::int32_t> val_ids;
  if (o.valid.empty()) {
    auto ids = run.vocab.encode(split.validation);
    if (!ids) throw input_error("the corpus cannot be tokenised");
    val_ids = std::move(*ids);
  } else {
    val_ids = held_out_ids("--valid", o.valid, run.vocab);
  }
  if (!o.test.empty()) run.test_ids = held_out_ids("--test", o.test, run.vocab);
  try {
    run.batches.emplace(*train_ids, o.batch, o.seq);
  } catch (const std::exception& e) {
    throw input_error("the corpus is too small: " + std::string(e.what()));
  }
  if (val_ids.size() < 2) throw input_error("the corpus is too small to hold out a validation text");
  su.train_tokens = train_ids->size();
  su.validation_tokens = val_ids.size();
  run.validation_ids = std::move(val_ids);
  su.accumulate = o.accumulate;
  su.carry_state = o.carry_state.value_or(o.accumulate == 1);
  su.windows = run.batches->windows() / o.accumulate;
  if (su.windows == 0)
    throw input_error("the corpus is too small: --accumulate " + std::to_string(o.accumulate) + " needs that many windows and it has " +
                      std::to_string(run.batches->windows()));
}

}  // namespace strata::lm::detail
