// The C++ registration API: lets a C++ type carried in a torch::IValue (a
// TorchScript class or a torch::class_ custom class, i.e. IValue::isObject())
// be a pytree node, so the IValue operations in ivalue_tree.h descend into it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/status/status.h"
#include "tree/literal.h"

namespace metafuse::tree {

struct IValueNodeDef {
  // Returns the children and sets *context to whatever unflatten needs back.
  std::function<std::vector<c10::IValue>(const c10::IValue& node,
                                         Literal* context)>
      flatten;
  std::function<c10::IValue(const Literal& context,
                            std::vector<c10::IValue> children)>
      unflatten;
};

// `type_name` is the IValue's type()->str(), e.g.
// "__torch__.torch.classes.my_ns.MyClass". Registering a name twice fails.
absl::Status RegisterIValueNode(const std::string& type_name,
                                IValueNodeDef def);
absl::Status UnregisterIValueNode(const std::string& type_name);
// Null when `type_name` is not registered. The pointer stays valid until the
// type is unregistered.
const IValueNodeDef* FindIValueNode(const std::string& type_name);

}  // namespace metafuse::tree
