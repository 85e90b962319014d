// libFuzzer harness for the crossover table's file (collectives/crossover.h: `ciuic-bench --crossover
// FILE`, the tables `ciuic-tune calibrate` reads, $CIUIC_CROSSOVER): ParseCrossover on arbitrary text,
// first as the runtime reads a table (ranks, transport, buffers, hosts), then with its measured points
// too. A refusal must be a ciuic::InputError (one clear message); any other exception (a JSON library's
// own, a UsageError let through...), a crash or a sanitizer report is a finding. A table it accepts is
// written back (CrossoverJson, what --crossover-out writes) and must read back to the same table,
// ranks, transport, buffers, hosts and points: the reader refusing or changing the writer's own file
// is a finding too. Run with its seed corpus: scripts/fuzz.sh SECONDS crossover, or
//   build-fuzz/fuzz/crossover_fuzz fuzz/corpus/crossover -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/crossover.h"
#include "core/error.h"

namespace {

bool SamePoints(const std::vector<ciuic::CrossoverPoint>& a, const std::vector<ciuic::CrossoverPoint>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].bytes != b[i].bytes || a[i].library_us != b[i].library_us || a[i].us != b[i].us) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  int ranks = 0, hosts = 0;
  std::string transport;
  bool registered = false;
  ciuic::Crossover table;
  try {
    table = ciuic::ParseCrossover(text, "fuzz.json", &ranks, &transport, nullptr, &registered, &hosts);
  } catch (const ciuic::InputError&) {
    return 0;  // refused with a message: what bad input must get
  }
  std::vector<ciuic::CrossoverPoint> points, points_oop;
  try {
    (void)ciuic::ParseCrossover(text, "fuzz.json", nullptr, nullptr, &points, nullptr, nullptr, &points_oop);
  } catch (const ciuic::InputError&) {
    points.clear();  // a table without (good) points: what --crossover reads, not a calibration
    points_oop.clear();
  }
  // What the writer makes of an accepted table must read back to it (both placements' bands and
  // points); a refusal there is a finding.
  const std::string again = ciuic::CrossoverJson(table, points, ranks, transport, registered, hosts, points_oop);
  int ranks2 = 0, hosts2 = 0;
  std::string transport2;
  bool registered2 = false;
  std::vector<ciuic::CrossoverPoint> points2, points_oop2;
  try {
    const ciuic::Crossover back =
        ciuic::ParseCrossover(again, "again.json", &ranks2, &transport2, points.empty() ? nullptr : &points2,
                              &registered2, &hosts2, points.empty() ? nullptr : &points_oop2);
    if (back.Digest() != table.Digest() || ranks2 != ranks || transport2 != transport || registered2 != registered ||
        hosts2 != hosts || !SamePoints(points, points2) || !SamePoints(points_oop, points_oop2))
      __builtin_trap();
  } catch (const ciuic::InputError&) {
    __builtin_trap();
  }
  return 0;
}
