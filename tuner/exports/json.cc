// json: the profile itself (ciuic.profile/1), which ciuic's runtime, C API and Python hook read; it
// expresses every choice.
#include "tuner/exports/consumer.h"

namespace ciuic::exports {

Consumer JsonConsumer() {
  return {"json", [](const Profile& p, const std::string&) { return ProfileToJson(p); },
          [](const Profile&) { return std::vector<std::string>{}; }, false};
}

}  // namespace ciuic::exports
