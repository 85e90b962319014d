#include "core/log.h"

namespace ciuic {

namespace {
std::string& Prefix() {
  static std::string p = "ciuic";
  return p;
}
}  // namespace

void SetLogPrefix(std::string prefix) { Prefix() = std::move(prefix); }
const std::string& LogPrefix() { return Prefix(); }

}  // namespace ciuic
