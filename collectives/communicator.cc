#include "collectives/communicator.h"

#include <unistd.h>

#include <cstring>

namespace ciuic {

const char* DeviceKindName(DeviceKind d) { return d == DeviceKind::kCuda ? "cuda" : "cpu"; }

std::vector<std::string> GatherHostnames(Communicator& comm) {
  constexpr size_t kLen = 64;
  char mine[kLen] = {};
  gethostname(mine, kLen - 1);
  std::vector<char> all(kLen * comm.Size());
  comm.HostAllGather(mine, all.data(), kLen);
  std::vector<std::string> out;
  for (int r = 0; r < comm.Size(); ++r) out.emplace_back(all.data() + r * kLen, strnlen(all.data() + r * kLen, kLen));
  return out;
}

}  // namespace ciuic
