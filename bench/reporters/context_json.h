#pragma once
// The run's context as JSON, built in this one place: the "context" of `--format json`
// (ciuic.bench/1) and the metadata of a `--trace` file.
#include <nlohmann/json.hpp>

#include "bench/record.h"

namespace ciuic {

nlohmann::ordered_json RunContextJson(const BenchContext& c);

}  // namespace ciuic
