// The worker's side of keys split over several servers: a push sends every part at once, a pull
// gathers them.

#include <cstring>
#include <exception>
#include <future>
#include <span>
#include <utility>

#include "strata/device/shape.hpp"
#include "worker.hpp"

namespace strata::kvstore_dist::internal {

expected<std::uint64_t> push_parts(worker_state& w, const kvstore::key& key, const split_layout& layout,
                                   const std::vector<tensor>& values, std::uint64_t seq) {
  std::vector<std::future<expected<unit_t>>> replies;
  std::uint64_t bytes = 0;
  auto send = [&](int part, auto msg) {
    replies.push_back(w.sys->request<unit_t>(w.servers[static_cast<std::size_t>(part)], w.options.timeout, std::move(msg)));
  };
  if (w.compression != kvstore::compression_type::none) {
    auto sum = local_sum(w, key, values, &layout.shape);
    if (!sum) return sum.error();
    // Each part is quantized with its slice of the key's residual; the rule is per element, so
    // the parts give what the whole key would (see the unsplit push for the residual's trick).
    auto kept = w.residuals.find(key);
    const std::vector<float> zeros(kept == w.residuals.end() || kept->second.size() != sum->size() ? sum->size() : 0, 0.0f);
    const float* old = zeros.empty() ? kept->second.data() : zeros.data();
    for (int p = 0; p < layout.parts(); ++p) {
      const auto n = static_cast<std::size_t>(layout.size(p));
      const auto at = static_cast<std::size_t>(layout.offset(p));
      compressed_push_msg m{to_wire(key), w.rank, seq, w.compression, w.threshold, {layout.size(p)},
                            std::vector<std::uint32_t>(kvstore::packed_words(w.compression, n))};
      kvstore::compress_packed(w.compression, w.threshold, old + at, sum->data() + at, m.codes.data(), n);
      bytes += m.codes.size() * sizeof(std::uint32_t) + sizeof(float);
      send(p, std::move(m));
    }
    auto sent = all_replies(replies);
    if (!sent) return sent.error();
    w.residuals[key] = std::move(*sum);
    return bytes;
  }
  tensor whole = values.empty() ? tensor() : values.front();
  if (values.size() != 1 || !whole.valid() || whole.dtype() != dtype::float32 || whole.shape() != layout.shape ||
      whole.get_device().kind() != device_kind::cpu) {
    // Several local values (or one to check): summed here, in the order given.
    auto sum = local_sum(w, key, values, &layout.shape);
    if (!sum) return sum.error();
    whole = tensor::from_host<float>(std::span<const float>(*sum), layout.shape, w.dev, w.s);
  }
  // Every part leaves straight from its slice of `whole`: no copy to split.
  for (int p = 0; p < layout.parts(); ++p)
    send(p, push_msg{to_wire(key), w.rank, seq, net::tensor_slice{whole, layout.offset(p), {layout.size(p)}}});
  bytes = static_cast<std::uint64_t>(whole.numel()) * sizeof(float);
  auto sent = all_replies(replies);
  if (!sent) return sent.error();
  return bytes;
}

expected<tensor> pull_parts(worker_state& w, const kvstore::key& key, const split_layout& layout,
                            std::uint64_t min_version) {
  std::vector<std::future<expected<tensor>>> replies;
  for (int p = 0; p < layout.parts(); ++p)
    replies.push_back(w.sys->request<tensor>(w.servers[static_cast<std::size_t>(p)], w.options.timeout,
                                             pull_msg{to_wire(key), min_version}));
  tensor out = tensor::empty(layout.shape, dtype::float32, w.dev, w.s);
  expected<void> first;
  for (int p = 0; p < layout.parts(); ++p) {
    auto part = replies[static_cast<std::size_t>(p)].get();
    if (!first) continue;
    if (!part) {
      first = part.error();
      continue;
    }
    if (part->numel() != layout.size(p) || part->dtype() != dtype::float32) {
      first = error(errc::runtime_failure, "kvstore dist pull: rank " + std::to_string(p) + " answered " +
                                               shape_text(part->shape()) + " for part " + std::to_string(p) + " of key " +
                                               key.to_string() + ", expected float32 [" + std::to_string(layout.size(p)) + "].");
      continue;
    }
    try {
      part->ready_event().synchronize();  // its bytes have arrived
    } catch (const std::exception& e) {
      first = error(errc::runtime_failure, "kvstore dist pull: part " + std::to_string(p) + " of key " + key.to_string() +
                                               " did not arrive: " + e.what());
      continue;
    }
    std::memcpy(out.data<float>() + layout.offset(p), part->data<float>(), static_cast<std::size_t>(layout.size(p)) * sizeof(float));
  }
  if (!first) return first.error();
  return out;
}

}  // namespace strata::kvstore_dist::internal
