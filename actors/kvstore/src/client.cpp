#include "strata/kvstore/kvstore.hpp"

#include <utility>


namespace strata::kvstore {

client::client(actor_system& system, actor_ref store, std::chrono::nanoseconds timeout)
    : client(system, std::move(store), timeout, spawn_options{.name = "kvstore-client"}) {}

client::client(actor_system& system, actor_ref store, std::chrono::nanoseconds timeout, spawn_options requester)
    : store_(std::move(store)), timeout_(timeout), session_(std::make_unique<strata::requester>(system, std::move(requester))) {}

client::~client() = default;

client::done client::init(kvstore::key key, tensor value) {
  return init(std::vector<kvstore::key>{std::move(key)}, std::vector<tensor>{std::move(value)});
}
client::done client::init(std::vector<kvstore::key> keys, std::vector<tensor> values) {
  return call<unit_t>(kvstore::init{std::move(keys), std::move(values)});
}

client::done client::push(kvstore::key key, tensor value) {
  return push(std::vector<kvstore::key>{std::move(key)}, std::vector<tensor>{std::move(value)});
}
client::done client::push(kvstore::key key, std::vector<tensor> values) {
  std::vector<kvstore::key> keys(values.size(), key);
  return push(std::move(keys), std::move(values));
}
client::done client::push(std::vector<kvstore::key> keys, std::vector<tensor> values) {
  return call<unit_t>(kvstore::push{std::move(keys), std::move(values)});
}

client::tensors client::pull(kvstore::key key, tensor out, std::uint64_t min_version) {
  return pull(std::vector<kvstore::key>{std::move(key)}, std::vector<tensor>{std::move(out)}, min_version);
}
client::tensors client::pull(kvstore::key key, std::vector<tensor> outs, std::uint64_t min_version) {
  std::vector<kvstore::key> keys(outs.size(), key);
  return pull(std::move(keys), std::move(outs), min_version);
}
client::tensors client::pull(std::vector<kvstore::key> keys, std::vector<tensor> outs,
                                             std::uint64_t min_version) {
  return call<std::vector<tensor>>(kvstore::pull{std::move(keys), std::move(outs), min_version});
}

client::tensors client::pushpull(kvstore::key key, std::vector<tensor> values,
                                                 std::vector<tensor> outs) {
  std::vector<kvstore::key> push_keys(values.size(), key);
  std::vector<kvstore::key> pull_keys(outs.size(), key);
  return call<std::vector<tensor>>(kvstore::pushpull{kvstore::push{std::move(push_keys), std::move(values)},
                                                    kvstore::pull{std::move(pull_keys), std::move(outs), 0}});
}
client::tensors client::pushpull(std::vector<kvstore::key> keys, std::vector<tensor> values,
                                                 std::vector<tensor> outs) {
  return call<std::vector<tensor>>(
      kvstore::pushpull{kvstore::push{keys, std::move(values)}, kvstore::pull{keys, std::move(outs), 0}});
}

client::tensors client::pushpull(kvstore::key key, std::vector<tensor> values) {
  std::vector<kvstore::key> keys(values.size(), key);
  return pushpull(std::move(keys), std::move(values));
}
client::tensors client::pushpull(std::vector<kvstore::key> keys, std::vector<tensor> values) {
  return call<std::vector<tensor>>(kvstore::pushpull_in_place{std::move(keys), std::move(values)});
}

client::tensors client::broadcast(kvstore::key key, tensor value, std::vector<tensor> outs) {
  std::vector<kvstore::key> out_keys(outs.size(), key);
  return call<std::vector<tensor>>(kvstore::broadcast{kvstore::init{{std::move(key)}, {std::move(value)}},
                                                      kvstore::pull{std::move(out_keys), std::move(outs), 0}});
}
client::tensors client::broadcast(std::vector<kvstore::key> keys, std::vector<tensor> values,
                                  std::vector<tensor> outs) {
  return call<std::vector<tensor>>(kvstore::broadcast{kvstore::init{keys, std::move(values)},
                                                      kvstore::pull{keys, std::move(outs), 0}});
}

client::done client::set_updater(kvstore::updater rule) {
  return call<unit_t>(kvstore::set_updater{std::move(rule)});
}
client::done client::push(kvstore::key key, std::vector<kvstore::row_sparse> values) {
  std::vector<kvstore::key> keys(values.size(), key);
  return call<unit_t>(kvstore::push_row_sparse{std::move(keys), std::move(values)});
}
client::tensors client::row_sparse_pull(kvstore::key key, tensor out, std::vector<std::int64_t> row_ids,
                                        std::uint64_t min_version) {
  return call<std::vector<tensor>>(
      kvstore::row_sparse_pull{{std::move(key)}, {std::move(row_ids)}, {std::move(out)}, min_version});
}
client::done client::save_optimizer_states(std::string path) {
  return call<unit_t>(kvstore::save_optimizer_states{std::move(path)});
}
client::done client::load_optimizer_states(std::string path) {
  return call<unit_t>(kvstore::load_optimizer_states{std::move(path)});
}
client::done client::set_gradient_compression(std::string type, float threshold) {
  return call<unit_t>(kvstore::set_gradient_compression{std::move(type), threshold});
}
client::done client::set_optimizer(kernels::sgd_options options) {
  return call<unit_t>(kvstore::set_optimizer{options});
}
client::done client::set_optimizer(kernels::adam_options options) {
  return call<unit_t>(kvstore::set_optimizer{options});
}
client::done client::set_optimizer(kernels::sgd_options options, kvstore::lr_scheduler scheduler) {
  return call<unit_t>(kvstore::set_optimizer{options, std::move(scheduler)});
}
client::done client::set_optimizer(kernels::adam_options options, kvstore::lr_scheduler scheduler) {
  return call<unit_t>(kvstore::set_optimizer{options, std::move(scheduler)});
}
client::done client::set_learning_rate(double lr) { return call<unit_t>(kvstore::set_learning_rate{lr}); }
std::future<expected<std::uint64_t>> client::version(kvstore::key key) {
  return call<std::uint64_t>(kvstore::version{std::move(key)});
}
client::done client::barrier() { return session_->barrier(); }
std::future<expected<bool>> client::is_capable(std::string capability) {
  return call<bool>(kvstore::is_capable{std::move(capability)});
}
std::future<expected<std::string>> client::type() { return call<std::string>(kvstore::store_type{}); }
client::done client::save(std::string path) { return call<unit_t>(kvstore::save{std::move(path)}); }
client::done client::load(std::string path) { return call<unit_t>(kvstore::load{std::move(path)}); }

}  // namespace strata::kvstore
