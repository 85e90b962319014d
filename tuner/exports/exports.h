#pragma once
// Exports: a tuned profile as each consumer reads it, one file per consumer over the one profile
// record (collectives/profile.h): json, nccl-env, nccl-tuner, ddp, deepspeed, horovod. Every choice of
// the profile a consumer cannot express is listed in its export (comments; a "_ciuic_not_expressed"
// list in deepspeed's JSON) and returned by UnexpressedChoices, one line each ("band [256M, inf): codec
// sign1: ..."), never dropped silently.
#include <string>
#include <vector>

#include "collectives/profile.h"

namespace ciuic {

// json | nccl-env | nccl-tuner | ddp | deepspeed | horovod
std::vector<std::string> ExportFormats();
// The export text; UsageError for an unknown format.
std::string ExportProfile(const Profile& p, const std::string& format);
std::vector<std::string> UnexpressedChoices(const Profile& p, const std::string& format);

}  // namespace ciuic
