// Contract tests of stores fed by tensors of another device kind (docs/kvstore.md, "values"): a
// cpu store fed by cuda values, and pulling into cuda outputs, equals the same store fed by cpu
// copies of the same random data bit for bit (one store and sharded); a cuda store fed by cpu
// values and pulling into cpu outputs agrees with a cpu store to rounding; float16 and bfloat16
// keys fed by tensors of the other kind equal a store fed by tensors of the store's own kind bit
// for bit. Part of test_kvstore_cuda: without a GPU every case is skipped.
#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_test_support.hpp"  // tests/kernels_cuda: the GPU precondition, random data, the error measure
#include "strata/device/device_manager.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"
#include "support/await.hpp"
#include "support/half_tensors.hpp"

namespace kvstore_crossing_cuda_test {

namespace kct = strata::kernels::cuda::test;
using strata::test::await;
using strata::tensor;

/// Where a script's tensors go: tensor slot i on `devs[i % devs.size()]`, each with a stream; of
/// dtype `type` (a 16-bit tensor holds the random floats rounded by the CPU's rule).
struct placement {
  std::vector<strata::device> devs;
  std::vector<strata::stream> streams;
  strata::dtype type = strata::dtype::float32;

  explicit placement(std::vector<strata::device> d, strata::dtype t = strata::dtype::float32)
      : devs(std::move(d)), type(t) {
    for (auto& dev : devs) streams.push_back(dev.create_stream());
  }
  tensor make(const std::vector<float>& v, std::vector<std::int64_t> shape, std::size_t slot) {
    const std::size_t i = slot % devs.size();
    if (type == strata::dtype::float32)
      return tensor::from_host<float>(std::span<const float>(v), std::move(shape), devs[i], streams[i]);
    return strata::test::half_tensor(type, v, std::move(shape), devs[i], streams[i]);
  }
  /// Reads `t` on a stream of its device (after its ready event: a pull's copy must be done); a
  /// 16-bit tensor's words each as a float (an exact integer), so that pulls compare as floats.
  std::vector<float> read(const tensor& t) {
    for (std::size_t i = 0; i < devs.size(); ++i) {
      if (devs[i] != t.get_device()) continue;
      if (t.dtype() == strata::dtype::float32) return t.to_host<float>(streams[i]);
      const auto w = strata::test::half_words(t, streams[i]);
      return std::vector<float>(w.begin(), w.end());
    }
    BOOST_FAIL("a pulled tensor is on a device the test did not create");
    return {};
  }
};

using pulls = std::vector<std::vector<float>>;

const std::vector<std::int64_t> shape{6, 50};  // 300 floats: three chunks of 128 with chunk_bytes 512
constexpr std::size_t numel = 300;

/// What a script makes and reads: random tensors on the placement's devices (outputs too: a copy
/// that did not happen shows), and the pulls read back, in order.
struct session {
  placement& at;
  kct::random_source& rng;
  pulls out;

  tensor value(std::size_t slot) { return at.make(rng.values(numel), shape, slot); }
  void read_all(const std::vector<tensor>& ts) {
    for (const auto& t : ts) out.push_back(at.read(t));
  }
};
using script = std::function<void(strata::kvstore::client& kv, session& s)>;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

struct fixture {
  strata::actor_system sys{strata::system_config{.worker_threads = 2}};
  strata::device_manager manager{strata::device_options{.cpu_threads_per_device = 1}};
  std::vector<strata::device> cpus = manager.create("cpu:2");
  // Two GPUs when there are, else two shares of GPU 0 (streams of their own).
  std::vector<strata::device> gpus = manager.create(gpu_count() >= 2 ? "cuda:0,1" : "cuda:0x2");

  pulls run(strata::kvstore::options options, placement& at, const script& f, std::uint64_t seed) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, std::move(options)));
    kct::random_source rng(seed);
    session s{at, rng, {}};
    f(kv, s);
    return s.out;
  }
  /// `f` with every tensor on the cpu (or on `reference_devs`), then with the tensors on `mixed`:
  /// the same pulls, exactly (`tolerance` 0) or within `tolerance` relative; tensors of `type`.
  void same_pulls(const strata::kvstore::options& reference, const strata::kvstore::options& store,
                  std::vector<strata::device> mixed, const script& f, double tolerance = 0.0,
                  strata::dtype type = strata::dtype::float32, std::vector<strata::device> reference_devs = {}) {
    placement host(reference_devs.empty() ? cpus : std::move(reference_devs), type), there(std::move(mixed), type);
    const pulls want = run(reference, host, f, 7);
    const pulls got = run(store, there, f, 7);
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      BOOST_TEST_INFO("pull " << i);
      if (tolerance == 0.0) BOOST_TEST(bitwise_equal(got[i], want[i]));
      else BOOST_TEST(kct::relative_error(got[i], want[i]) <= tolerance);
    }
  }
};

/// Every request kind that takes dense values or outputs, with one and two values per key, SGD with
/// momentum, and a user updater; tensor slots alternate between the placement's devices.
void every_request(strata::kvstore::client& kv, session& s) {
  auto value = [&s](std::size_t slot) { return s.value(slot); };
  auto read_all = [&s](const std::vector<tensor>& ts) { s.read_all(ts); };
  BOOST_TEST(await(kv.init({"w", "v"}, {value(0), value(1)})).has_value());
  BOOST_TEST(await(kv.push("w", {value(0), value(1)})).has_value());  // two values, two devices
  read_all(await(kv.pull("w", {value(1), value(0)})).value());
  BOOST_TEST(await(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.05, .momentum = 0.9})).has_value());
  for (std::size_t step = 0; step < 3; ++step) {
    BOOST_TEST(await(kv.push("v", {value(step)})).has_value());  // one value
    read_all(await(kv.pushpull("w", {value(step + 1), value(step), value(step + 1)}, {value(step)})).value());
    tensor in_place = value(step + 1);
    read_all(await(kv.pushpull("v", {in_place})).value());
  }
  read_all(await(kv.broadcast("b", value(1), {value(0), value(1)})).value());
  BOOST_TEST(await(kv.set_updater([](const strata::kvstore::key&, const tensor& merged, tensor& stored) {
               // cpu stores only (the script's stores are cpu stores): stored = 0.5 stored - merged
               const float* m = merged.data<float>();
               float* held = stored.data<float>();
               for (std::int64_t i = 0; i < stored.numel(); ++i) held[i] = 0.5f * held[i] - m[i];
             })).has_value());
  BOOST_TEST(await(kv.push({"b", "w"}, {value(0), value(1)})).has_value());
  read_all(await(kv.pull({"w", "b", "v"}, {value(0), value(1), value(0)})).value());
}

/// Assign and SGD only (no host updater), for cuda stores.
void device_requests(strata::kvstore::client& kv, session& s) {
  auto value = [&s](std::size_t slot) { return s.value(slot); };
  auto read_all = [&s](const std::vector<tensor>& ts) { s.read_all(ts); };
  BOOST_TEST(await(kv.init({"w", "v"}, {value(0), value(1)})).has_value());
  BOOST_TEST(await(kv.push("w", {value(0), value(1), value(0)})).has_value());
  read_all(await(kv.pull({"w", "v"}, {value(1), value(0)})).value());
  BOOST_TEST(await(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.05, .momentum = 0.9})).has_value());
  for (std::size_t step = 0; step < 2; ++step) {
    read_all(await(kv.pushpull("w", {value(step), value(step + 1)}, {value(step + 1), value(step)})).value());
    tensor in_place = value(step);
    read_all(await(kv.pushpull("v", {in_place})).value());
  }
  read_all(await(kv.broadcast("b", value(0), {value(1)})).value());
}

BOOST_AUTO_TEST_SUITE(kvstore_crossing_cuda, *boost::unit_test::precondition(kct::gpu_available))

BOOST_FIXTURE_TEST_CASE(a_cpu_store_fed_by_cuda_values_equals_the_same_store_fed_by_cpu_copies_bit_for_bit, fixture) {
  same_pulls({}, {}, gpus, every_request);  // every tensor on a GPU
  same_pulls({}, {}, {gpus[0], cpus[0], gpus[1]}, every_request);  // GPU and cpu tensors in one request
  same_pulls({}, {.kind = strata::kvstore::kind::device, .merge_device = cpus[1]}, gpus, every_request);
}

BOOST_FIXTURE_TEST_CASE(a_sharded_cpu_store_fed_by_cuda_values_equals_one_store_fed_by_cpu_copies_bit_for_bit, fixture) {
  // chunk_bytes 512: every key is split into three chunks, so the shards read and write slices of
  // the caller's cuda tensors.
  same_pulls({}, {.shards = 2, .chunk_bytes = 512}, gpus, every_request);
  same_pulls({}, {.shards = 3, .chunk_bytes = 512, .shard_devices = cpus}, {cpus[0], gpus[0], gpus[1]}, every_request);
}

BOOST_FIXTURE_TEST_CASE(a_cuda_store_fed_by_cpu_values_agrees_with_a_cpu_store, fixture) {
  const strata::kvstore::options on_gpu{.kind = strata::kvstore::kind::device, .merge_device = gpus[0]};
  same_pulls({}, on_gpu, cpus, device_requests, 1e-6);
  same_pulls({}, on_gpu, {cpus[0], gpus[1]}, device_requests, 1e-6);
  same_pulls({}, {.shards = 2, .chunk_bytes = 512, .shard_devices = gpus}, cpus, device_requests, 1e-6);
}

// float16 and bfloat16 keys (random values rounded) fed by tensors of the other device kind, each
// against a store of the tensors' own kind fed the same words, bit for bit: cuda values and
// outputs of a cpu store (whole keys, and the split slices of three shards) against a cuda store,
// and against the same cpu store fed cpu copies; cpu values of a cuda store (one and three shards)
// against a cpu store. Assign and SGD with momentum, pushpull, broadcast.
BOOST_FIXTURE_TEST_CASE(sixteen_bit_tensors_of_the_other_kind_equal_a_store_of_their_own_kind_bit_for_bit, fixture) {
  const strata::kvstore::options on_gpu{.kind = strata::kvstore::kind::device, .merge_device = gpus[0]};
  // 300 words: chunks of 128 with chunk_bytes 256, so that shards copy slices.
  const strata::kvstore::options cpu_shards{.shards = 3, .chunk_bytes = 256};
  const strata::kvstore::options gpu_shards{.shards = 3, .chunk_bytes = 256,
                                            .shard_devices = {gpus[0], gpus[1], gpus[0]}};
  for (const auto type : {strata::dtype::float16, strata::dtype::bfloat16}) {
    BOOST_TEST_CONTEXT(to_string(type)) {
      same_pulls(on_gpu, {}, gpus, device_requests, 0.0, type, gpus);  // a cpu store, cuda tensors
      same_pulls(gpu_shards, cpu_shards, gpus, device_requests, 0.0, type, gpus);
      same_pulls({}, {}, {gpus[0], cpus[0], gpus[1]}, device_requests, 0.0, type);  // both kinds in a request
      same_pulls({}, cpu_shards, gpus, device_requests, 0.0, type);
      same_pulls({}, on_gpu, cpus, device_requests, 0.0, type);  // a cuda store, cpu tensors
      same_pulls(cpu_shards, gpu_shards, cpus, device_requests, 0.0, type);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(a_tensor_of_another_dtype_than_the_keys_and_a_sim_tensor_are_refused_with_one_sentence, fixture) {
  strata::device_manager sims(strata::device_options{.sim_time_scale = 0});
  auto sim = sims.create("sim:1");
  placement host(cpus), gpu(gpus);
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  auto half_on_cpu = tensor::empty(shape, strata::dtype::float16, cpus[0], host.streams[0]);
  auto float_on_gpu = tensor::empty(shape, strata::dtype::float32, gpus[0], gpu.streams[0]);
  BOOST_TEST(await(kv.init("h", half_on_cpu)).has_value());
  auto p = await(kv.push("h", {float_on_gpu}));
  BOOST_REQUIRE(!p.has_value());
  BOOST_TEST(p.error().message() == "kvstore push: the value for key \"h\" has dtype float32, expected float16.");

  strata::kvstore::client on_gpu(sys, strata::kvstore::spawn(sys, {.kind = strata::kvstore::kind::device,
                                                                    .merge_device = gpus[0]}));
  auto s = await(on_gpu.init("w", tensor::empty(shape, strata::dtype::float32, sim[0], sim[0].create_stream())));
  BOOST_REQUIRE(!s.has_value());
  BOOST_TEST(s.error().message() == "kvstore init: the value for key \"w\" is on sim:0, which a store on " +
                                        gpus[0].name() +
                                        " cannot read; expected a cpu or cuda tensor (sim tensors hold no data).");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_crossing_cuda_test
