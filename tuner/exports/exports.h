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

// What the consumer's job is, where the profile does not say.
struct ExportOptions {
  // The job's gradient dtype (fp32 | fp16 | bf16; empty: the consumer's default, bf16 for DeepSpeed):
  // bucket sizes are given in its elements, and a reduction precision equal to it is left alone.
  std::string grad_dtype;
};

// json | nccl-env | nccl-tuner | ddp | deepspeed | horovod
std::vector<std::string> ExportFormats();
// The export text; UsageError for an unknown format.
std::string ExportProfile(const Profile& p, const std::string& format, const ExportOptions& o = {});
std::vector<std::string> UnexpressedChoices(const Profile& p, const std::string& format, const ExportOptions& o = {});

}  // namespace ciuic
