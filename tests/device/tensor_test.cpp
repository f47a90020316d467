// Contract tests: tensors, their host round trips and ready events.
#include <boost/test/unit_test.hpp>

#include <random>

#include "helpers.hpp"

using namespace strata;

namespace tensor_test {
template <class T, class D>
std::vector<T> random_values(std::size_t n, D dist) {
  std::mt19937_64 rng(12345);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

BOOST_AUTO_TEST_SUITE(tensors)

BOOST_AUTO_TEST_CASE(shape_numel_and_bytes_follow_the_dtype) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  auto t = tensor::empty({2, 3, 4}, dtype::float32, dev[0], s);
  BOOST_TEST(t.numel() == 24);
  BOOST_TEST(t.bytes() == 96u);
  BOOST_TEST(t.rank() == 3u);
  BOOST_TEST(t.dim(1) == 3);
  BOOST_TEST((t.dtype() == dtype::float32));
  BOOST_TEST((t.get_device() == dev[0]));
  BOOST_TEST(t.ready_event().query());  // nothing pending
  auto ids = tensor::empty({5}, dtype::int64, dev[0], s);
  BOOST_TEST(ids.bytes() == 40u);
  auto scalar = tensor::empty({}, dtype::int32, dev[0], s);
  BOOST_TEST(scalar.numel() == 1);
  BOOST_CHECK_THROW(tensor::empty({2, -1}, dtype::float32, dev[0], s), device_error);
}

BOOST_AUTO_TEST_CASE(a_float_tensor_survives_a_host_round_trip_on_random_data) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  auto values = random_values<float>(4096, std::normal_distribution<double>(0.0, 3.0));
  auto t = tensor::from_host<float>(values, {64, 64}, dev[0], s);
  BOOST_TEST(t.ready_event().valid());
  auto back = t.to_host<float>(s);
  BOOST_TEST(back == values);
  t.ready_event().synchronize();
  BOOST_TEST(t.data<float>()[17] == values[17]);  // cpu tensors are host memory
}

BOOST_AUTO_TEST_CASE(token_id_tensors_survive_a_host_round_trip) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  auto ids = random_values<std::int64_t>(1000, std::uniform_int_distribution<std::int64_t>(0, 1LL << 40));
  auto t = tensor::from_host<std::int64_t>(ids, dev[0], s);
  BOOST_TEST(t.shape() == std::vector<std::int64_t>{1000});
  BOOST_TEST(t.to_host<std::int64_t>(s) == ids);
  auto small = random_values<std::int32_t>(77, std::uniform_int_distribution<std::int32_t>(-9, 50000));
  BOOST_TEST(tensor::from_host<std::int32_t>(small, dev[0], s).to_host<std::int32_t>(s) == small);
}

BOOST_AUTO_TEST_CASE(a_tensor_sent_to_another_device_is_used_after_its_ready_event) {
  auto dev = make_devices("cpu:2");
  auto producer = dev[0].create_stream();
  auto consumer = dev[1].create_stream();
  auto values = random_values<float>(1000, std::uniform_real_distribution<double>(-1, 1));
  test::gate slow;
  producer.launch({.name = "slow", .cpu = [&] { (void)slow.pass(); }});
  auto t = tensor::from_host<float>(values, dev[0], producer);  // ready only after "slow"
  BOOST_TEST(!t.ready_event().query());
  // "Receiver" side: wait for the ready event on its own stream, then copy to its device.
  tensor received = t;  // what a message would carry
  auto local = tensor::empty(received.shape(), received.dtype(), dev[1], consumer);
  consumer.wait(received.ready_event());
  received.storage().record_stream(consumer);
  consumer.copy(local.storage(), received.storage());
  local.set_ready_event(consumer.record());
  slow.open();
  BOOST_TEST(local.to_host<float>(consumer) == values);
}

BOOST_AUTO_TEST_CASE(a_device_reads_in_place_the_memory_of_its_own_kind_only) {
  auto cpus = make_devices("cpu:2");
  auto sims = make_devices("sim:2", test::deterministic_sim());
  auto on_cpu = cpus[0].allocate(64, cpus[0].create_stream());
  auto on_sim = sims[0].allocate(64, sims[0].create_stream());
  BOOST_TEST(cpus[0].can_read_in_place(on_cpu));
  BOOST_TEST(cpus[1].can_read_in_place(on_cpu));  // host memory, whichever cpu device holds it
  BOOST_TEST(sims[1].can_read_in_place(on_sim));  // sim memory holds no data
  BOOST_TEST(!cpus[0].can_read_in_place(on_sim));
  BOOST_TEST(!sims[0].can_read_in_place(on_cpu));
}

BOOST_AUTO_TEST_CASE(from_host_rejects_a_value_count_that_does_not_match_the_shape) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  std::vector<float> v(10, 1.5f);
  BOOST_CHECK_THROW(tensor::from_host<float>(v, {3, 4}, dev[0], s), device_error);
}

BOOST_AUTO_TEST_CASE(sixteen_bit_tensors_are_made_from_and_read_as_their_words) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  const auto words = random_values<std::uint16_t>(300, std::uniform_int_distribution<int>(0, 0xffff));
  for (auto type : {dtype::float16, dtype::bfloat16}) {
    auto t = tensor::from_host_words(words, {20, 15}, type, dev[0], s);
    BOOST_TEST((t.dtype() == type));
    BOOST_TEST(t.bytes() == 600u);
    BOOST_TEST(t.to_host_words(s) == words);
    BOOST_CHECK_THROW(t.to_host<float>(s), device_error);  // the words are not floats
  }
  try {
    (void)tensor::from_host_words(words, {300}, dtype::float32, dev[0], s);
    BOOST_FAIL("a float32 tensor was made from 16-bit words");
  } catch (const device_error& e) {
    BOOST_TEST(std::string(e.what()).find(
                   "tensor::from_host_words: dtype float32 has no 16-bit words; expected float16 or bfloat16.") !=
               std::string::npos);
  }
  BOOST_CHECK_THROW(tensor::from_host_words(words, {7, 7}, dtype::float16, dev[0], s), device_error);  // count
  auto floats = tensor::from_host<float>(std::vector<float>(4, 1.f), dev[0], s);
  BOOST_CHECK_THROW(floats.to_host_words(s), device_error);
}

BOOST_AUTO_TEST_CASE(typed_access_checks_the_element_type_and_the_device) {
  device_manager m(test::deterministic_sim());
  auto cpu = m.create("cpu:1");
  auto sim = m.create("sim:1");
  auto s = cpu[0].create_stream();
  auto t = tensor::empty({4}, dtype::float32, cpu[0], s);
  BOOST_CHECK_THROW(t.data<std::int32_t>(), device_error);
  BOOST_CHECK_THROW(t.to_host<std::int64_t>(s), device_error);
  auto ss = sim[0].create_stream();
  std::vector<float> v(256, 2.0f);
  auto st = tensor::from_host<float>(v, sim[0], ss);  // sim: counts bytes, holds nothing
  BOOST_TEST(sim[0].memory().bytes_in_use == 1024u);
  BOOST_TEST(st.raw_data() == nullptr);
  BOOST_CHECK_THROW(st.data<float>(), device_error);
  BOOST_CHECK_THROW(st.to_host<float>(ss), device_error);
  st.ready_event().synchronize();
}

BOOST_AUTO_TEST_CASE(the_typed_device_pointer_refuses_a_wrong_element_type_with_one_sentence) {
  device_manager m(test::deterministic_sim());
  auto cpu = m.create("cpu:1");
  auto sim = m.create("sim:1");
  auto s = cpu[0].create_stream();
  auto f = tensor::empty({4}, dtype::float32, cpu[0], s);
  auto ids = tensor::empty({4}, dtype::int32, cpu[0], s);
  BOOST_TEST(static_cast<void*>(f.device_data<float>()) == f.raw_data());
  BOOST_TEST(static_cast<const void*>(ids.device_data<const std::int32_t>()) == ids.raw_data());
  try {
    (void)ids.device_data<float>();
    BOOST_FAIL("a float pointer to an int32 tensor was handed out");
  } catch (const device_error& e) {
    BOOST_TEST((e.code() == device_errc::invalid_argument));
    const std::string text = e.what();
    BOOST_TEST(text.find("float32") != std::string::npos);
    BOOST_TEST(text.find("tensor of type int32") != std::string::npos);
    BOOST_TEST(text.find(". ") == std::string::npos);  // one sentence
  }
  BOOST_CHECK_THROW(f.device_data<std::int64_t>(), device_error);
  // Unlike data<T>(), it serves any device: sim tensors hold no data, so their pointer is null,
  // and the element type is still checked.
  auto ss = sim[0].create_stream();
  auto st = tensor::empty({8}, dtype::float32, sim[0], ss);
  BOOST_TEST(st.device_data<float>() == nullptr);
  BOOST_CHECK_THROW(st.device_data<std::uint8_t>(), device_error);
}

BOOST_AUTO_TEST_CASE(a_buffer_too_small_for_the_shape_is_rejected) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  buffer b = dev[0].allocate(16, s);
  BOOST_CHECK_THROW(tensor({8}, dtype::float32, b), device_error);
  BOOST_CHECK_NO_THROW(tensor({4}, dtype::float32, b));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace tensor_test
