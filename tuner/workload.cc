#include "tuner/workload.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ciuic {

namespace {
using nlohmann::json;
constexpr const char* kSchema = "ciuic.workload/1";
}  // namespace

std::vector<std::string> BuiltinWorkloads() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(ProfilesDir()) / "workloads", ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Workload ParseWorkload(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", origin, e.what()));
  }
  if (!j.is_object()) throw InputError(fmt::format("{}: a workload is a JSON object", origin));
  static const char* kKeys[] = {"schema", "name", "source", "flops_note", "dtype", "parameters",
                                "forward_flops_per_sample", "default_batch_per_device", "order", "tensors"};
  for (const auto& [k, v] : j.items())
    if (std::find(std::begin(kKeys), std::end(kKeys), k) == std::end(kKeys))
      throw InputError(fmt::format("{}: unknown key '{}'", origin, k));
  const std::string schema = j.value("schema", "");
  if (schema != kSchema) {
    throw InputError(schema.rfind("ciuic.workload/", 0) == 0
                         ? fmt::format("{}: schema '{}' is newer than this build reads ({})", origin, schema, kSchema)
                         : fmt::format("{}: schema '{}' is not a ciuic workload ({})", origin, schema, kSchema));
  }
  if (j.value("order", "") != "backward") throw InputError(fmt::format("{}: tensors must be in backward order", origin));
  if (j.value("dtype", "") != "fp32") throw InputError(fmt::format("{}: dtype must be fp32", origin));
  Workload w;
  w.origin = origin;
  try {
    w.name = j.at("name").get<std::string>();
    w.parameters = j.at("parameters").get<uint64_t>();
    w.default_batch = j.at("default_batch_per_device").get<int>();
    for (const auto& t : j.at("tensors")) {
      WorkloadTensor x;
      x.name = t.at("name").get<std::string>();
      x.elements = 1;
      for (const auto& d : t.at("shape")) {
        const int64_t v = d.get<int64_t>();
        if (v < 1) throw InputError(fmt::format("{}: tensor {} has a dimension {}", origin, x.name, v));
        x.elements *= static_cast<uint64_t>(v);
      }
      x.forward_flops = t.at("forward_flops").get<double>();
      if (!(x.forward_flops >= 0)) throw InputError(fmt::format("{}: tensor {} has negative FLOPs", origin, x.name));
      w.tensors.push_back(x);
    }
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: {}", origin, e.what()));
  }
  uint64_t total = 0;
  for (const auto& t : w.tensors) total += t.elements;
  if (total != w.parameters)
    throw InputError(fmt::format("{}: tensors hold {} parameters but 'parameters' says {}", origin, total, w.parameters));
  if (w.tensors.empty() || w.default_batch < 1) throw InputError(fmt::format("{}: no tensors or no batch", origin));
  return w;
}

Workload LoadWorkload(const std::string& name_or_path) {
  std::string path = name_or_path;
  if (name_or_path.find('/') == std::string::npos && name_or_path.find(".json") == std::string::npos) {
    path = (std::filesystem::path(ProfilesDir()) / "workloads" / (name_or_path + ".json")).string();
    if (!std::filesystem::exists(path)) {
      std::string known;
      for (const auto& n : BuiltinWorkloads()) known += (known.empty() ? "" : " ") + n;
      throw InputError(fmt::format("unknown workload '{}' (built-in: {}; or a path to a JSON file)", name_or_path, known));
    }
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("cannot read workload '{}'", path));
  std::stringstream s;
  s << f.rdbuf();
  return ParseWorkload(s.str(), path);
}

double BucketUs(const Fabric& f, const Topology& t, const CommPlan& plan, double bytes) {
  if (plan.local_us) return plan.local_us(bytes);
  // Without a calibration the codec kernels stream their passes at CodecKernelGbps and, on a GPU,
  // each launch adds its fixed cost (cost_model.h); CPU kernels have none.
  const double launches = t.intra.fabric == "shm" ? 0.0 : plan.codec_launches * kGpuKernelLaunchUs;
  const double codec_us = plan.codec_us ? plan.codec_us(bytes)
                                        : launches + plan.codec_passes * bytes / (CodecKernelGbps(t) * 1e3);
  // No overlap credit: the runtime encodes, exchanges and decodes in sequence (workload.h).
  return PredictAllReduceUs(f, plan.algo, bytes, plan.wire_ratio, codec_us);
}

StepTiming ScheduleStep(const Workload& w, const Topology& t, const Fabric& f, const CommPlan& plan, int batch) {
  return ScheduleStep(w, t, plan, batch, [&](double bytes) { return BucketUs(f, t, plan, bytes); });
}

StepTiming ScheduleStep(const Workload& w, const Topology& t, const CommPlan& plan, int batch,
                        const std::function<double(double bytes)>& bucket_us) {
  StepTiming s;
  const double flops_per_us = t.device.peak_tflops_bf16 * 1e6 * plan.model_efficiency;
  double now = 0, comm_free = 0, bucket = 0;
  auto flush = [&](double ready) {
    if (bucket <= 0) return;
    const double start = std::max(ready, comm_free);
    const double us = bucket_us(bucket);
    comm_free = start + us;
    s.comm_us += us;
    ++s.buckets;
    bucket = 0;
  };
  for (const auto& x : w.tensors) {
    now += 2.0 * x.forward_flops * batch / flops_per_us;  // backward ≈ 2 × forward
    bucket += 4.0 * static_cast<double>(x.elements);
    if (bucket >= plan.bucket_bytes) flush(now);
  }
  flush(now);
  s.backward_us = now;
  s.exposed_us = std::max(0.0, comm_free - now);
  return s;
}

}  // namespace ciuic
