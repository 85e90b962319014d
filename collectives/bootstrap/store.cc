#include "collectives/bootstrap/store.h"

#include "core/error.h"
#include "core/files.h"

namespace ciuic {

namespace {

class CallbackStore : public KeyValueStore {
 public:
  CallbackStore(StoreSetFn set, StoreGetFn get, void* user) : set_(set), get_(get), user_(user) {}

  void Set(const std::string& key, const std::vector<char>& value) override {
    // An empty value still points somewhere: callbacks may hand it to memcpy, which takes no null.
    static const char kNothing = 0;
    if (set_(user_, key.c_str(), value.empty() ? &kNothing : value.data(), value.size()) != 0)
      throw RuntimeError(fmt::format("the job's store refused to set key '{}'", PrintableLine(key)));
  }
  std::vector<char> Get(const std::string& key) override {
    // Gloo's addresses and NCCL's unique id fit in the first call; a longer value takes a second.
    std::vector<char> value(512);
    size_t size = 0;
    if (get_(user_, key.c_str(), value.data(), value.size(), &size) != 0)
      throw RuntimeError(
          fmt::format("the job's store has no key '{}' (a rank did not arrive before the store's "
                      "timeout?)",
                      PrintableLine(key)));
    if (size > value.size()) {
      value.resize(size);
      if (get_(user_, key.c_str(), value.data(), value.size(), &size) != 0 || size != value.size())
        throw RuntimeError(fmt::format("the job's store changed key '{}' while it was read", PrintableLine(key)));
    }
    value.resize(size);
    return value;
  }

 private:
  StoreSetFn set_;
  StoreGetFn get_;
  void* user_;
};

}  // namespace

std::shared_ptr<KeyValueStore> MakeCallbackStore(StoreSetFn set, StoreGetFn get, void* user) {
  if (!set || !get) throw UsageError("a store needs both its set and get callbacks");
  return std::make_shared<CallbackStore>(set, get, user);
}

}  // namespace ciuic
