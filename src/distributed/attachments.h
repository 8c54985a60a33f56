// The table behind Communicator::attachment, kept by each of kiln's communicators: what a
// device's own transport made for the group (the CUDA backend's NCCL communicator of a GPU).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kiln::distributed {

class Attachments {
 public:
  // The one kept under key; else make's, kept (the lock is held meanwhile: a second caller for
  // any key waits for the first to be made), or null when make is empty.
  std::shared_ptr<void> get(const std::string& key,
                            const std::function<std::shared_ptr<void>()>& make) {
    std::lock_guard lock(mutex_);
    const auto found = table_.find(key);
    if (found != table_.end()) return found->second;
    if (!make) return nullptr;
    std::shared_ptr<void> made = make();
    if (made) table_.emplace(key, made);
    return made;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<void>> table_;
};

}  // namespace kiln::distributed
