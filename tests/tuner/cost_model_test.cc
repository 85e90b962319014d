// The cost model against published nccl-tests figures (printed both sides), the strict topology
// loader, and the ciuic-tune command line's bad-input contract.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tuner/cost_model.h"
#include "tuner/topology.h"

namespace ciuic {
namespace {

double PredictedRingBusbw(const Topology& t) {
  const double bytes = 8.0 * (1u << 30);
  return BusBwGbps(bytes, t.ranks(), PredictAllReduceUs(EffectiveFabric(t), ModelAlgo::kNcclRing, bytes));
}

TEST(CostModel, MatchesPublishedNcclTestsBusbwWithin15Percent) {
  struct Case {
    const char* topology;
    int nodes;
    double published;
  };
  for (const Case c : {Case{"dgx_a100", 1, 230.0}, Case{"dgx_a100", 2, 8 * 24.0}, Case{"dgx_a100", 4, 8 * 24.0},
                       Case{"dgx_h100", 1, 370.0}}) {
    const Topology t = LoadTopology(c.topology, c.nodes);
    const double predicted = PredictedRingBusbw(t);
    std::printf("%-9s nodes %d: predicted %.1f GB/s, published %.1f GB/s (%+.1f%%)\n", c.topology, c.nodes, predicted,
                c.published, 100 * (predicted / c.published - 1));
    EXPECT_NEAR(predicted, c.published, 0.15 * c.published) << c.topology << " nodes " << c.nodes;
  }
}

TEST(CostModel, LatencyAndCompressionBehaveAsAlphaBetaSays) {
  const Fabric f = EffectiveFabric(LoadTopology("dgx_a100", 4));
  // Small messages: log-depth algorithms beat the 2(P-1)-step ring.
  EXPECT_LT(PredictAllReduceUs(f, ModelAlgo::kRecursiveDoubling, 1024), PredictAllReduceUs(f, ModelAlgo::kRing, 1024));
  EXPECT_LT(PredictAllReduceUs(f, ModelAlgo::kNcclBest, 1024), PredictAllReduceUs(f, ModelAlgo::kNcclRing, 1024));
  // Large messages: a 4x smaller wire is close to 4x faster when compute is free, never faster.
  const double big = 1 << 30;
  const double plain = PredictAllReduceUs(f, ModelAlgo::kRing, big), packed = PredictAllReduceUs(f, ModelAlgo::kRing, big, 4.0);
  EXPECT_GT(plain / packed, 3.5);
  EXPECT_LE(plain / packed, 4.0);
  EXPECT_GT(PredictAllReduceUs(f, ModelAlgo::kRing, big, 4.0, 500.0), packed);
  // One rank moves nothing.
  Topology one = LoadTopology("dgx_a100");
  one.devices_per_node = 1;
  EXPECT_EQ(PredictAllReduceUs(EffectiveFabric(one), ModelAlgo::kRing, big), 0.0);
}

std::string Valid() {
  std::ifstream f(ProfilesDir() + "/topologies/dgx_a100.json");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Topology, BuiltinsLoadAndCpuLocalIsDetected) {
  for (const auto& name : BuiltinTopologies()) {
    const Topology t = LoadTopology(name);
    EXPECT_GT(t.ranks(), 0) << name;
    EXPECT_GT(t.intra.bw_gbps, 0) << name;
    EXPECT_EQ(t.Fingerprint().size(), 16u);
  }
  const Topology local = LoadTopology("cpu_local");
  EXPECT_EQ(local.intra.fabric, "shm");
  EXPECT_NE(local.sources.at("intra.bw_gbps_per_device").find("measured"), std::string::npos);
  EXPECT_NE(LoadTopology("dgx_a100").Fingerprint(), LoadTopology("dgx_h100").Fingerprint());
  EXPECT_NE(LoadTopology("dgx_a100").Fingerprint(), LoadTopology("dgx_a100", 2).Fingerprint());
}

TEST(Topology, StrictLoaderRefusesBadFiles) {
  const std::string ok = Valid();
  ASSERT_NO_THROW(ParseTopology(ok, "t.json"));
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = ok;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const std::vector<std::string> bad = {
      "",
      "{",
      "[]",
      replace("\"ciuic.topology/1\"", "\"ciuic.topology/2\""),
      replace("\"ciuic.topology/1\"", "\"other/1\""),
      replace("\"nodes\": 1", "\"nodes\": 0"),
      replace("\"nodes\": 1", "\"nodes\": \"one\""),
      replace("\"nodes\": 1,", "\"nodes\": 1, \"extra\": 2,"),
      replace("\"memory_bw_gbps\": 2039", "\"memory_bw_gbps\": -5"),
      replace("\"fabric\": \"nvswitch\"", "\"fabric\": \"warp\""),
      replace("\"nvls\": false", "\"nvls\": 0"),
      replace("\"latency_us\": 3.0,", ""),
      replace("\"intra.latency_us\": ", "\"intra.other\": "),
      replace("\"count\": 8", "\"count\": 8.5e9"),
  };
  for (const auto& text : bad) EXPECT_THROW(ParseTopology(text, "t.json"), InputError) << text.substr(0, 200);
  EXPECT_THROW(LoadTopology("no_such_topology"), InputError);
  EXPECT_THROW(LoadTopology("/no/such/file.json"), InputError);
  EXPECT_THROW(LoadTopology("cpu_local", 2), InputError);  // no NICs between nodes
}

int RunTune(const std::string& args, std::string* err) {
  const std::string path = ::testing::TempDir() + "/ciuic_tune_err";
  const int status = std::system((std::string(CIUIC_TUNE_EXE) + " " + args + " >/dev/null 2>" + path).c_str());
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  *err = s.str();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST(TuneCli, BadInputIsOneLineAndExitOne) {
  for (const char* args : {"", "frobnicate", "model", "model --topology nope", "model --topology dgx_a100 --sizes 0",
                           "topologies --nodes -1", "model --topology dgx_a100 --bogus", "model --topology cpu_local --nodes 3"}) {
    std::string err;
    EXPECT_EQ(RunTune(args, &err), 1) << args << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << args << ": " << err;
  }
  std::string err;
  EXPECT_EQ(RunTune("topologies", &err), 0) << err;
  EXPECT_EQ(RunTune("model --topology dgx_h100 --nodes 2 --sizes 1M,1G", &err), 0) << err;
}

}  // namespace
}  // namespace ciuic
