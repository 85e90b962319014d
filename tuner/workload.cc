#include "tuner/workload.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_reader.h"

namespace ciuic {

namespace {
constexpr const char* kWorkloadSchema = "ciuic.workload/1";
// 1e13 parameters: far above any model, and small enough that a workload's sum cannot overflow.
constexpr uint64_t kMaxParameters = 10'000'000'000'000ull;
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
  const JsonDocument doc(text, "workload", origin);
  const JsonValue j = doc.Root();
  j.OnlyKeys({"schema", "name", "source", "flops_note", "dtype", "parameters", "forward_flops_per_sample",
              "default_batch_per_device", "order", "tensors", "transformer"});
  const JsonValue schema = j["schema"];
  if (schema.String() != kWorkloadSchema)
    schema.Fail(schema.String().rfind("ciuic.workload/", 0) == 0
                    ? fmt::format("{} is newer than this build reads ({})", schema.Text(), kWorkloadSchema)
                    : fmt::format("{} is not a ciuic workload ({})", schema.Text(), kWorkloadSchema));
  j["order"].OneOf({"backward"});
  j["dtype"].OneOf({"fp32"});
  for (const char* note : {"source", "flops_note"})
    if (j.Has(note)) j[note].String();
  Workload w;
  w.origin = origin;
  w.name = j["name"].NonEmptyString();
  w.parameters = j["parameters"].Unsigned(1, kMaxParameters);
  if (j.Has("forward_flops_per_sample")) j["forward_flops_per_sample"].Number(0, 1e18);
  w.default_batch = static_cast<int>(j["default_batch_per_device"].Integer(1, 1 << 20));
  if (j.Has("transformer")) {
    const JsonValue t = j["transformer"];
    t.OnlyKeys({"hidden", "sequence", "layers", "ffn"});
    w.transformer.hidden = static_cast<int>(t["hidden"].Integer(1, 1 << 20));
    w.transformer.sequence = static_cast<int>(t["sequence"].Integer(1, 1 << 24));
    w.transformer.layers = static_cast<int>(t["layers"].Integer(1, 1 << 16));
    w.transformer.ffn = static_cast<int>(t["ffn"].Integer(1, 1 << 22));
  }
  const JsonValue tensors = j["tensors"];
  for (const JsonValue& t : tensors.Elements()) {
    t.OnlyKeys({"name", "shape", "forward_flops"});
    WorkloadTensor x;
    x.name = t["name"].NonEmptyString();
    x.elements = 1;
    const std::vector<JsonValue> shape = t["shape"].Elements();
    if (shape.empty()) t["shape"].Fail("a tensor needs at least one dimension");
    for (const JsonValue& d : shape) {
      const uint64_t v = d.Unsigned(1, kMaxParameters);
      if (x.elements > kMaxParameters / v) t["shape"].Fail(fmt::format("more than {} elements", kMaxParameters));
      x.elements *= v;
    }
    x.forward_flops = t["forward_flops"].Number(0, 1e18);
    w.tensors.push_back(x);
  }
  if (w.tensors.empty()) tensors.Fail("a workload needs at least one tensor");
  uint64_t total = 0;
  for (const auto& t : w.tensors) total += t.elements;  // each <= kMaxParameters: no overflow in practice
  if (total != w.parameters)
    j["parameters"].Fail(fmt::format("{} but the tensors hold {} parameters", w.parameters, total));
  return w;
}

Workload LoadWorkload(const std::string& name_or_path) {
  std::string path = name_or_path;
  if (name_or_path.find('/') == std::string::npos && name_or_path.find(".json") == std::string::npos) {
    path = (std::filesystem::path(ProfilesDir()) / "workloads" / (name_or_path + ".json")).string();
    if (!std::filesystem::exists(path)) {
      std::string known;
      for (const auto& n : BuiltinWorkloads()) known += (known.empty() ? "" : " ") + n;
      throw InputError(
          fmt::format("unknown workload '{}' (built-in: {}; or a path to a JSON file)", name_or_path, known));
    }
  }
  return ParseWorkload(ReadTextFile(path, "workload"), path);
}

double BucketUs(const Fabric& f, const Topology& t, const CommPlan& plan, double bytes) {
  if (plan.local_us) return plan.local_us(bytes);
  // Without a calibration the codec kernels stream their passes at CodecKernelGbps and, on a GPU,
  // each launch adds its fixed cost (cost_model.h); CPU kernels have none.
  const double launches = t.intra.fabric == "shm" ? 0.0 : plan.codec_launches * kGpuKernelLaunchUs;
  const double codec_us =
      plan.codec_us ? plan.codec_us(bytes) : launches + plan.codec_passes * bytes / (CodecKernelGbps(t) * 1e3);
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
