#pragma once
// The key-value store a job's ranks already meet through, for communicators made without mpiexec:
// torch.distributed's store (reached from Python through the C API's two callbacks), torchrun's
// rendezvous. Keys are written once and read by every rank; Get blocks until its key exists or the
// store's own timeout passes.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ciuic {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void Set(const std::string& key, const std::vector<char>& value) = 0;
  virtual std::vector<char> Get(const std::string& key) = 0;
};

// The C API's store: set(user, key, value, size) and get(user, key, buf, cap, &size) return 0 on
// success; get blocks until the key exists, sets the value's whole size and copies at most cap bytes.
using StoreSetFn = int (*)(void* user, const char* key, const void* value, size_t size);
using StoreGetFn = int (*)(void* user, const char* key, void* buf, size_t cap, size_t* size);
std::shared_ptr<KeyValueStore> MakeCallbackStore(StoreSetFn set, StoreGetFn get, void* user);

}  // namespace ciuic
