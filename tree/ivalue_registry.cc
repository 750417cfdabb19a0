#include "tree/ivalue_registry.h"

#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace metafuse::tree {

namespace {

struct Registry {
  std::mutex mutex;
  // unique_ptr: entries keep their address while others come and go.
  std::map<std::string, std::unique_ptr<IValueNodeDef>> defs;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;  // never destroyed: no exit races
  return *registry;
}

}  // namespace

absl::Status RegisterIValueNode(const std::string& type_name,
                                IValueNodeDef def) {
  if (!def.flatten || !def.unflatten) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RegisterIValueNode(", type_name, "): flatten and unflatten are both required"));
  }
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, inserted] = r.defs.emplace(type_name, nullptr);
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("IValue node type ", type_name, " is already registered"));
  }
  it->second = std::make_unique<IValueNodeDef>(std::move(def));
  return absl::OkStatus();
}

absl::Status UnregisterIValueNode(const std::string& type_name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.defs.erase(type_name) == 0) {
    return absl::NotFoundError(
        absl::StrCat("IValue node type ", type_name, " is not registered"));
  }
  return absl::OkStatus();
}

const IValueNodeDef* FindIValueNode(const std::string& type_name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.defs.find(type_name);
  return it == r.defs.end() ? nullptr : it->second.get();
}

}  // namespace metafuse::tree
