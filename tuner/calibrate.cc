#include "tuner/calibrate.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/buffer.h"
#include "core/database.h"
#include "core/error.h"
#include "core/files.h"
#include "core/sizes.h"
#include "core/timer.h"
#include "kernels/codec.h"
#include "tuner/plan_space.h"

namespace ciuic {

namespace {

double MedianUs(const std::function<void()>& fn, bool cuda) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    const double t0 = NowSeconds();
    fn();  // a device run ends with a synchronous copy inside fn
    t.push_back((NowSeconds() - t0) * 1e6);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

bool Calibration::Has(const std::string& codec) const { return gbps.count({"encode", codec}) > 0; }

double Calibration::UsPerByte(const std::string& codec, int ranks) const {
  if (!Has(codec)) return 0;
  const auto get = [&](const char* k) {
    auto it = gbps.find({k, codec});
    return it == gbps.end() || it->second <= 0 ? 0.0 : 1.0 / (it->second * 1e3);
  };
  const double share = ranks > 1 ? static_cast<double>(ranks - 1) / ranks : 0.0;
  return get("encode") + get("decode") + share * get("hop");
}

std::string CalibrationDevice(bool cuda) {
  return cuda ? std::string("cuda:") + CudaDeviceName() : "cpu:" + CpuModel();
}

void RunCalibration(const std::string& db_path, bool cuda, size_t bytes, std::ostream& out) {
  if (cuda && CudaDeviceCount() == 0) throw RuntimeError("calibrate --device cuda: no CUDA device is visible");
  if (bytes < 4096) throw UsageError("calibrate: size must be at least 4K");
  const MemoryKind kind = cuda ? MemoryKind::kDevice : MemoryKind::kHost;
  const size_t n = bytes / 4;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = 1e-3f * static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1e-3f;
  Buffer x(n * 4, kind), out_buf(n * 4, kind);
  CopyBytes(x.data(), kind, host.data(), MemoryKind::kHost, n * 4);
  const std::string device = CalibrationDevice(cuda);
  Database db(db_path);
  out << fmt::format("# calibrate {}  size {} ({} fp32)\n# {:<14} {:>10} {:>10} {:>10}  (GB/s of fp32 gradient)\n",
                     device, FormatSize(bytes), n, "codec", "encode", "decode", "hop");
  const SearchSpace space = AllReducePlanSpace();
  Database::Transaction tx(db);
  const std::string now = IsoNow();
  for (const auto& name : space.dims[0].values) {
    if (name == "none") continue;
    CodecSpec spec = ParseCodec(name);
    spec.error_feedback = false;
    const Codec c(spec);
    Buffer wire(std::max<size_t>(c.WireBytes(n), 1), kind), wire2(std::max<size_t>(c.WireBytes(n), 1), kind);
    CodecState st;
    c.Encode(x.as<float>(), n, wire.data(), &st);
    auto sync = [&] {
      if (cuda) CopyBytes(host.data(), MemoryKind::kHost, out_buf.data(), kind, 4);  // a synchronous copy
    };
    const double enc = MedianUs([&] { c.Encode(x.as<float>(), n, wire.data(), &st, nullptr, false); sync(); }, cuda);
    const double dec = MedianUs([&] { c.Decode(wire.data(), n, out_buf.as<float>(), st.step - 1); sync(); }, cuda);
    double hop = 0;
    if (c.HasDecodeAddEncode())
      hop = MedianUs([&] { c.DecodeAddEncode(wire.data(), x.as<float>(), n, wire2.data(), 0); sync(); }, cuda);
    const double gb = static_cast<double>(n * 4) / 1e3;
    const std::pair<const char*, double> rows[] = {{"encode", gb / enc}, {"decode", gb / dec}, {"hop", hop > 0 ? gb / hop : 0}};
    for (const auto& [kernel, v] : rows) {
      if (v <= 0) continue;
      Statement ins(db.handle(), "INSERT INTO calibrations (created, device, kernel, codec, gbps) VALUES (?,?,?,?,?)");
      ins.Bind(1, now).Bind(2, device).Bind(3, std::string(kernel)).Bind(4, name).Bind(5, v);
      ins.Step();
    }
    out << fmt::format("  {:<14} {:>10.2f} {:>10.2f} {:>10}\n", name, gb / enc, gb / dec,
                       hop > 0 ? fmt::format("{:.2f}", gb / hop) : "-");
  }
  tx.Commit();
  out << fmt::format("# stored in {} (table calibrations, device '{}')\n", db_path, device);
}

Calibration LoadCalibration(const std::string& db_path, const std::string& device) {
  Calibration c;
  c.device = device;
  if (!std::filesystem::exists(db_path)) return c;
  Database db(db_path);
  // Newest value per (kernel, codec).
  Statement q(db.handle(), "SELECT kernel, codec, gbps FROM calibrations WHERE device = ? ORDER BY id");
  q.Bind(1, device);
  while (q.Step()) c.gbps[{q.ColumnText(0), q.ColumnText(1)}] = q.ColumnDouble(2);
  return c;
}

}  // namespace ciuic
