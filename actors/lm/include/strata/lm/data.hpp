#pragma once
/// \file
/// Text data for the LSTM language model: reading a corpus, tokenising it (characters or words),
/// the vocabulary, and batching a token stream into [seq, batch] windows the way PyTorch's
/// word_language_model does (the stream cut into `batch` columns, consecutive windows of `seq`
/// rows, targets shifted by one).
///
/// Example:
/// \code
///   auto text = strata::lm::read_text_file("corpus.txt");          // throws on bad input
///   auto split = strata::lm::split_text(text, 0.05);
///   auto vocab = strata::lm::vocabulary::build(strata::lm::token_kind::chars, split.train);
///   strata::lm::token_batches batches(*vocab.encode(split.train), 20, 35);
///   std::vector<std::int32_t> x, y;
///   batches.window(0, x, y);                                        // [35, 20] seq-major
/// \endcode

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "strata/error.hpp"

namespace strata::lm {

/// What a token is.
enum class token_kind : std::uint8_t {
  chars,  ///< One Unicode code point (the text is UTF-8).
  words,  ///< A whitespace-separated word; every line end is the token "<eos>".
};

/// "char" or "word".
const char* to_string(token_kind kind) noexcept;
/// Parses "char" or "word"; throws std::invalid_argument with one sentence otherwise.
token_kind parse_token_kind(std::string_view name);

/// The unknown-token string, present in every vocabulary this library builds.
inline constexpr std::string_view unknown_token = "<unk>";
/// The end-of-line token of word vocabularies.
inline constexpr std::string_view end_of_line_token = "<eos>";

/// Splits `text` into token strings: code points for `chars` (the text must be valid UTF-8),
/// whitespace-separated words plus "<eos>" per line end for `words`.
std::vector<std::string> tokenize(token_kind kind, std::string_view text);

/// Token <-> id mapping. Ids are dense in [0, size()).
class vocabulary {
public:
  vocabulary() = default;

  /// The vocabulary of `text`: "<unk>" is id 0, then the tokens; for `chars` every code point
  /// seen, in code-point order; for `words` the `max_size - 1` most frequent words (ties in
  /// lexicographic order; max_size 0: all), then sorted by frequency.
  static vocabulary build(token_kind kind, std::string_view text, std::size_t max_size = 0);
  /// From the tokens in id order (as vocab.json stores them). Throws std::invalid_argument on a
  /// duplicate token.
  static vocabulary from_tokens(token_kind kind, std::vector<std::string> tokens);

  token_kind kind() const noexcept { return kind_; }
  std::size_t size() const noexcept { return tokens_.size(); }
  const std::vector<std::string>& tokens() const noexcept { return tokens_; }
  /// The id of `token`, or -1.
  std::int32_t id(std::string_view token) const;
  /// The id of "<unk>", or -1 when the vocabulary has none.
  std::int32_t unknown_id() const noexcept { return unk_; }

  /// Ids of `text`'s tokens; unknown tokens map to "<unk>" when the vocabulary has it, else the
  /// result is an errc::invalid_argument error naming the first unknown token.
  expected<std::vector<std::int32_t>> encode(std::string_view text) const;
  /// The text of `ids` (words joined by spaces, "<eos>" as a line end).
  std::string decode(const std::vector<std::int32_t>& ids) const;

  /// JSON object token -> id (vocab.json).
  std::string to_json() const;
  /// Parses vocab.json; errc::invalid_argument with one sentence if it is not an object of
  /// distinct tokens to the ids 0..n-1.
  static expected<vocabulary> from_json(token_kind kind, std::string_view json);

  friend bool operator==(const vocabulary& a, const vocabulary& b) { return a.kind_ == b.kind_ && a.tokens_ == b.tokens_; }

private:
  void index();
  token_kind kind_ = token_kind::chars;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t> ids_;
  std::int32_t unk_ = -1;
};

/// Reads a text file; throws std::runtime_error with one sentence naming the file when it cannot
/// be read, is empty, or is binary (a NUL byte or invalid UTF-8).
std::string read_text_file(const std::string& path);

/// The default corpus: the plain-text fortune files of Debian's `fortunes` package
/// (/usr/share/games/fortunes, files without .dat/.u8, in name order), else the licence texts in
/// /usr/share/common-licenses. `source` receives a description of what was read. Throws
/// std::runtime_error if neither exists.
std::string read_default_corpus(std::string& source);

/// A corpus split into training and held-out text.
struct text_split {
  std::string train;
  std::string validation;
};

/// The last `fraction` of the text (moved forward to a line start when one is near) is validation.
text_split split_text(const std::string& text, double fraction);

/// A token stream cut into `batch` columns of `rows()` tokens (the tail that does not fill a row
/// is dropped), read in windows of `seq` rows: window w has tokens rows [w*seq, (w+1)*seq) and
/// targets one row later. Column b holds stream positions [b*rows(), (b+1)*rows()).
class token_batches {
public:
  /// Throws std::invalid_argument with one sentence if batch or seq is 0 or the stream is too
  /// short for one window (needs batch * (seq + 1) tokens).
  token_batches(const std::vector<std::int32_t>& stream, std::size_t batch, std::size_t seq);

  std::size_t batch() const noexcept { return batch_; }
  std::size_t seq() const noexcept { return seq_; }
  std::size_t rows() const noexcept { return rows_; }
  /// Whole windows in one pass: (rows - 1) / seq.
  std::size_t windows() const noexcept { return (rows_ - 1) / seq_; }
  /// Fills tokens and targets ([seq, batch], seq-major) of window `w` < windows().
  void window(std::size_t w, std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets) const;
  /// The batched stream, [rows, batch] row-major.
  const std::vector<std::int32_t>& data() const noexcept { return data_; }

private:
  std::size_t batch_, seq_, rows_;
  std::vector<std::int32_t> data_;
};

}  // namespace strata::lm
