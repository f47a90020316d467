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
/// pulls and checkpoints are not. cpu and cuda stores (the cuda kernels not yet run on a GPU):
/// sim stores hold no data, and a store whose versions collect several workers' pushes
/// (`options::contributions_per_version` above 1) would mix their residuals: each refuses with
/// one sentence. Reply: `unit`.
struct set_gradient_compression {
  std::string type = "2bit";
  float threshold = 0.5f;
};

/// `type` as a `compression_type`, or one sentence naming the known types.
expected<compression_type> parse_compression_type(std::string_view type);

/// `type` and `threshold` checked together, as `set_gradient_compression` checks them: the type
/// as `parse_compression_type`, then a 2bit threshold above 0 and any other one finite, or one
/// sentence naming the threshold and what was expected.
expected<compression_type> parse_compression(std::string_view type, float threshold);

/// One quantize-and-dequantize pass over `n` elements: adds `grad` to `residual`, writes the
/// value that is sent (dequantized) to `sent`, and leaves in `residual` what was held back.
/// `sent` may alias `grad`.
void compress(compression_type type, float threshold, const float* grad, float* residual, float* sent,
              std::size_t n) noexcept;

/// How many 32-bit words `compress_packed` writes for `n` elements: 16 elements per word for
/// 2bit, 32 for 1bit (a partial last word), `n` for none (the float32 bits themselves).
std::size_t packed_words(compression_type type, std::size_t n) noexcept;

/// `compress`, but what is sent leaves as packed codes in `codes` (`packed_words(type, n)` words)
/// instead of floats: MXNet's wire layout, which a distributed worker sends. 2bit: element i
/// takes bits of byte i/4 of the code array from the top down (element 0 in bits 7-6), 11 for
/// +threshold, 10 for -threshold, 00 for 0. 1bit: element i is bit 7 - i%8 of byte i/8, 1 for +1,
/// 0 for -1. Bits past `n` in the last word are 0. `residual` changes exactly as in `compress`.
void compress_packed(compression_type type, float threshold, const float* grad, float* residual,
                     std::uint32_t* codes, std::size_t n) noexcept;

/// The floats `codes` stand for (the receiver's side of `compress_packed`): writes `n` values to
/// `out`, each +threshold, 0 or -threshold (2bit), +1 or -1 (1bit), or the float itself (none),
/// equal bit for bit to the `sent` values of `compress`.
void decompress(compression_type type, float threshold, const std::uint32_t* codes, float* out,
                std::size_t n) noexcept;

}  // namespace strata::kvstore
