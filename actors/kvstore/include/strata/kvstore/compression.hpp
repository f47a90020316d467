#pragma once
/// \file
/// MXNet's gradient compression for a kvstore: each pushed value is quantized to a few levels
/// before it is merged, and what the quantization left out (the residual) is kept and added to
/// the next value pushed in the same place (error feedback), so nothing is lost, only delayed.
///
///   2bit: r += g; r >= t: send +t, r -= t; r <= -t: send -t, r += t; else send 0.
///   1bit: r += g; r >  t: send +1, r -= 1; else send -1, r += 1.
///
/// (The rules of MXNet's `gradient_compression-inl.h`; its nightly kvstore test checks the same
/// values.) A store keeps one residual per key and per position of the value in a push, as
/// MXNet's local store keeps one per device. docs/kvstore.md, "Gradient compression".

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "strata/error.hpp"

namespace strata::kvstore {

/// The quantization of a compressed store.
enum class compression_type : std::uint8_t {
  none,     ///< values are merged as pushed
  one_bit,  ///< MXNet's "1bit": +1 or -1 per element
  two_bit,  ///< MXNet's "2bit": +threshold, 0 or -threshold per element
};

/// MXNet's `set_gradient_compression({'type': '2bit', 'threshold': 0.5})`. `type` is "2bit",
/// "1bit" or "none" (compression off; residuals dropped). 2bit needs a threshold above 0; 1bit
/// takes any finite threshold (MXNet's 1bit test uses 0). Pushes after it are compressed; inits,
/// pulls and checkpoints are not. cpu stores only: sim stores hold no data, cuda stores have no
/// kernel for it yet, and a store whose versions collect several workers' pushes
/// (`options::contributions_per_version` above 1) would mix their residuals: each refuses with
/// one sentence. Reply: `unit`.
struct set_gradient_compression {
  std::string type = "2bit";
  float threshold = 0.5f;
};

/// `type` as a `compression_type`, or one sentence naming the known types.
expected<compression_type> parse_compression_type(std::string_view type);

/// One quantize-and-dequantize pass over `n` elements: adds `grad` to `residual`, writes the
/// value that is sent (dequantized) to `sent`, and leaves in `residual` what was held back.
/// `sent` may alias `grad`.
void compress(compression_type type, float threshold, const float* grad, float* residual, float* sent,
              std::size_t n) noexcept;

}  // namespace strata::kvstore
