// Specializations keyed by input signature (runtime::InputSignature).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace metafuse::compiler {

// Specializations keyed by input signature (InputSignature): the one used
// last is checked first, since consecutive calls usually share it; at most
// kMax entries. Not synchronized: its owner holds a lock around it.
template <typename T>
class SignatureCache {
 public:
  static constexpr size_t kMax = 8;
  // The entry for `signature` (it becomes the last used), or nullptr.
  const T* Find(const std::vector<int64_t>& signature) {
    if (last_ != nullptr && last_->first == signature) return &last_->second;
    for (auto& entry : entries_) {
      if (entry->first == signature) {
        last_ = entry.get();
        return &entry->second;
      }
    }
    return nullptr;
  }
  bool full() const { return entries_.size() >= kMax; }
  const T& Insert(std::vector<int64_t> signature, T value) {
    entries_.push_back(std::make_unique<Entry>(std::move(signature), std::move(value)));
    last_ = entries_.back().get();
    return last_->second;
  }
  // The entry used last, or nullptr.
  const T* last() const { return last_ != nullptr ? &last_->second : nullptr; }

 private:
  using Entry = std::pair<std::vector<int64_t>, T>;
  std::vector<std::unique_ptr<Entry>> entries_;
  Entry* last_ = nullptr;
};

}  // namespace metafuse::compiler
