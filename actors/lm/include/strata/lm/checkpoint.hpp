#pragma once
/// \file
/// Checkpoints of the LSTM language model: a directory with model.safetensors (the parameters,
/// PyTorch names and shapes, float32), config.json (model configuration, training position),
/// vocab.json (token -> id), optimizer.json (the optimiser's settings), for optimizers that
/// keep state (momentum, Adam) optimizer.kvstore (the KVStore's saved state), and for runs that
/// carry the LSTM state across steps state.safetensors (that state).
///
/// Saving is atomic per file and as a whole: each file is written to DIR/.tmp-<name>, fsynced
/// and renamed over DIR/<name>; config.json goes last and is the commit marker. It records the
/// size and FNV-1a hash of the other files. Before the renames, each file the committed
/// config.json records is kept as DIR/.prev-<name> (removed after the commit), so a directory
/// whose save was interrupted between two renames still loads as the committed checkpoint: the
/// loader reads the .prev- twin of a file that no longer matches. Files that match neither are
/// refused, never silently mixed.
///
/// Example:
/// \code
///   strata::lm::checkpoint ck{config, strata::lm::token_kind::chars, vocab, *pipeline.parameters()};
///   ck.step = 300;
///   if (auto e = strata::lm::save_checkpoint("ckpt", ck); e) std::cerr << e.message() << '\n';
///   auto back = strata::lm::load_checkpoint("ckpt");    // expected<checkpoint>
/// \endcode

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "strata/lm/config.hpp"
#include "strata/lm/data.hpp"
#include "strata/error.hpp"

namespace strata::lm {

/// One float32 tensor of a safetensors file.
struct safetensor {
  std::string name;
  std::vector<std::size_t> shape;
  std::vector<float> values;  ///< Row-major; size = product of shape.
};

/// The bytes of a safetensors file: an 8-byte little-endian header length, a JSON header
/// {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}}
/// padded with spaces to a multiple of 8, then the tensors' little-endian data in the given
/// order. Throws std::invalid_argument if a tensor's values do not match its shape.
std::string encode_safetensors(const std::vector<safetensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});
/// Parses safetensors bytes (F32 tensors only). errc::invalid_argument with one sentence when the
/// bytes are truncated, the header is not valid JSON, offsets overlap or leave the data, or a
/// dtype is not F32.
expected<std::vector<safetensor>> decode_safetensors(const std::string& bytes);

/// Where a learning-rate schedule stands (see trainer_options::lr_schedule).
struct schedule_record {
  std::string kind = "constant";        ///< constant, step, cosine or plateau
  std::size_t warmup_steps = 0;
  double lr_scale = 1.0;                ///< plateau: the factor its decays have reached
  double best_val_loss = std::numeric_limits<double>::infinity();  ///< plateau: the best so far
  std::size_t stale_validations = 0;    ///< plateau: validations since the best
};

/// Everything a checkpoint holds.
struct checkpoint {
  lm::config config;                   ///< Sizes and training settings (vocab = vocabulary size).
  token_kind tokens = token_kind::chars;
  vocabulary vocab;
  std::vector<named_parameter> parameters;  ///< PyTorch order and names.
  std::size_t step = 0;                 ///< Completed training steps (the data position).
  std::size_t epoch = 0;                ///< Completed epochs.
  std::size_t windows_per_epoch = 0;    ///< Steps in one pass over the training text.
  std::string corpus;                   ///< Where the training text came from (informative).
  /// The KVStore's weights, versions and optimizer state as a kvstore::save file
  /// (`optimizer.kvstore`); empty for plain SGD, which keeps none, and in older checkpoints.
  std::string optimizer_state;
  schedule_record schedule;             ///< The learning-rate schedule's position.
  /// Truncated BPTT across steps (carry_state): the (h, c) each layer carries into the next step,
  /// "h_l<k>" and "c_l<k>", each [batch, hidden], in `state.safetensors`; empty when the run does
  /// not carry state (and in older checkpoints), and a resumed run then starts from zeros.
  std::vector<named_parameter> carried_state;
};

/// Writes `ck` into `dir` (created if missing), atomically as described in the file comment.
/// Returns a default error on success, else one sentence naming the file that failed.
error save_checkpoint(const std::string& dir, const checkpoint& ck);

/// True if `dir` holds a committed checkpoint (its config.json exists).
bool checkpoint_exists(const std::string& dir);

/// Reads the checkpoint in `dir`. errc::invalid_argument with one sentence naming the directory
/// and the problem for a missing, truncated, corrupt or inconsistent file, or a config.json with
/// a missing key, an unknown key, a count that is not a whole number or a value of the wrong
/// type; never throws.
expected<checkpoint> load_checkpoint(const std::string& dir);

/// Why a checkpoint cannot continue a run of `config` on `tokens`: one sentence naming the first
/// differing setting (layers, hidden, embed, vocab, tokens, batch, seq), or a default error
/// when it can.
error check_compatible(const checkpoint& ck, const lm::config& config, token_kind tokens);

}  // namespace strata::lm
