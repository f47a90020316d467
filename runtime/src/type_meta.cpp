#include "strata/type_meta.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <typeindex>
#include <unordered_map>

namespace strata {
namespace {

struct type_registry {
  std::mutex m;
  std::unordered_map<std::type_index, const type_meta*> by_type;
  std::deque<type_meta> metas;  // stable addresses
};

type_registry& registry() {
  static type_registry* r = new type_registry;  // never destroyed: used during static teardown
  return *r;
}

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(mangled);
}

}  // namespace

namespace detail {
const type_meta* register_type(const std::type_info& info) {
  auto& r = registry();
  std::lock_guard lock(r.m);
  auto it = r.by_type.find(std::type_index(info));
  if (it != r.by_type.end()) return it->second;
  r.metas.push_back(type_meta{static_cast<std::uint32_t>(r.metas.size() + 1), demangle(info.name())});
  const type_meta* meta = &r.metas.back();
  r.by_type.emplace(std::type_index(info), meta);
  return meta;
}
}  // namespace detail

std::string type_name(std::uint32_t id) {
  auto& r = registry();
  std::lock_guard lock(r.m);
  if (id == 0 || id > r.metas.size()) return "?";
  return r.metas[id - 1].name;
}

}  // namespace strata
