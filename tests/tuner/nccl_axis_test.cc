// NCCL's own axis (tuner/nccl_axis.h): the model's advice, the measured choice with a timer standing in
// for NCCL (no GPU here), communicators of another size, and ciuic-tune nccl-axis's refusals.
#include "tuner/nccl_axis.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/json_reader.h"

namespace ciuic {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024;
const std::string kSource = CIUIC_SOURCE_DIR;

TEST(NcclAxis, EachBandIsTimedAtItsGeometricMiddle) {
  const std::vector<uint64_t> want = {32 * kKiB, 256 * kKiB, 4 * kMiB, 64 * kMiB, 512 * kMiB};
  ASSERT_EQ(SizeBands().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(NcclAxisBandBytes(SizeBands()[i].first, SizeBands()[i].second), want[i]) << i;
}

// Model mode: the cost model's NCCL algorithm per band kept on NCCL's allreduce, as advice the
// plugin does not apply; runtime bands are untouched.
TEST(NcclAxis, TheModelAdvisesAnAlgorithmPerNcclBandThatThePluginNeverApplies) {
  Profile p = LoadProfile(kSource + "/tests/data/profiles/dgx_a100_mixed.profile.json");
  const Profile before = p;
  AdviseNcclAxis(p, LoadTopology(p.topology, p.nodes));
  int advised = 0;
  for (size_t i = 0; i < p.rules.size(); ++i) {
    const ProfileRule& r = p.rules[i];
    SCOPED_TRACE(r.min_bytes);
    if (r.algo == "nccl" && r.codec == "none") {
      EXPECT_FALSE(r.nccl.algo.empty());
      EXPECT_TRUE(r.nccl.proto.empty() && r.nccl.channels == 0 && r.nccl.chunk_bytes == 0);
      EXPECT_FALSE(r.nccl.measured);
      EXPECT_FALSE(NcclTunerChoiceFor(r).apply);
      ++advised;
    } else {
      EXPECT_TRUE(r.nccl.Empty()) << r.algo << " " << r.codec;
    }
  }
  EXPECT_GT(advised, 0);
  EXPECT_LT(advised, static_cast<int>(p.rules.size())) << "the fixture has runtime bands too";
  // One node of A100s has no NVLink SHARP: the model never advises NVLS there; H100s on one node do.
  for (const ProfileRule& r : p.rules) EXPECT_NE(r.nccl.algo, "nvls");
  Profile h = LoadProfile(kSource + "/profiles/dgx_h100.profile.json");
  AdviseNcclAxis(h, LoadTopology("dgx_h100", 1));
  EXPECT_EQ(h.rules.back().nccl.algo, "nvls") << "512 MiB on one H100 node";
  EXPECT_EQ(before.rules.size(), p.rules.size());
}

// A stand-in for NCCL: per setting and size a time; settings NCCL refuses fail.
struct FakeNccl {
  std::map<std::string, int> calls;
  double operator()(const NcclSettings& s, uint64_t bytes, std::string* failure) {
    const std::string key = DescribeNcclSettings(s);
    ++calls[key];
    if (s.algo.rfind("collnet", 0) == 0 || s.algo.rfind("nvls", 0) == 0) {
      *failure = "NCCL: no algorithm available";
      return std::numeric_limits<double>::infinity();
    }
    if (bytes == 32 * kKiB) return key == "tree/ll" ? 80 : 100;      // tree/ll wins clearly
    if (bytes == 256 * kKiB) return key == "ring/ll128" ? 98 : 100;  // within 5%: NCCL's own stays
    if (bytes == 4 * kMiB) return 100;                               // nothing better
    // Large: ring/simple is best, and more so with 16 channels.
    if (key == "ring/simple, 16 channels") return 70;
    if (key == "ring/simple") return 90;
    return s.Empty() ? 100 : 110;
  }
};

TEST(NcclAxis, TheFastestSettingIsRecordedAsMeasuredOnlyWhereItBeatsNcclsDefault) {
  const Profile p = LoadProfile(kSource + "/profiles/dgx_h100.profile.json");
  FakeNccl fake;
  NcclAxisOptions o;
  o.min_gain = 0.05;
  std::ostringstream log;
  const Profile m = MeasureNcclAxis(p, o, std::ref(fake), log);
  ASSERT_EQ(m.rules.size(), 5u);
  EXPECT_EQ(m.rules[0].nccl.algo, "tree");
  EXPECT_EQ(m.rules[0].nccl.proto, "ll");
  EXPECT_EQ(m.rules[0].nccl.channels, 0);
  EXPECT_TRUE(m.rules[0].nccl.measured);
  EXPECT_DOUBLE_EQ(m.rules[0].nccl.measured_us, 80);
  EXPECT_DOUBLE_EQ(m.rules[0].nccl.default_us, 100);
  EXPECT_TRUE(m.rules[1].nccl.Empty()) << "2% faster is not 5%";
  EXPECT_FALSE(m.rules[1].nccl.measured);
  EXPECT_TRUE(m.rules[2].nccl.Empty());
  for (int i : {3, 4}) {
    EXPECT_EQ(DescribeNcclSettings(m.rules[i].nccl), "ring/simple, 16 channels") << i;
    EXPECT_TRUE(m.rules[i].nccl.measured);
    EXPECT_TRUE(NcclTunerChoiceFor(m.rules[i]).apply);
  }
  // Every algorithm x protocol NCCL has for allreduce once per band, then the channel counts of the
  // fastest pair, then NCCL's own once.
  EXPECT_EQ(fake.calls["NCCL's own"], 5);
  for (const char* pair : {"ring/ll", "ring/ll128", "ring/simple", "tree/ll", "tree/ll128", "tree/simple",
                           "nvls/simple", "nvls_tree/simple", "collnet_direct/simple", "collnet_chain/simple"})
    EXPECT_EQ(fake.calls[pair], 5) << pair;
  EXPECT_EQ(fake.calls.count("pat/simple"), 0u) << "NCCL runs PAT for allgather/reducescatter only";
  EXPECT_EQ(fake.calls["ring/simple, 16 channels"], 2);
  EXPECT_EQ(fake.calls["tree/ll, 8 channels"], 1);
  // What it wrote reads back as the same profile, measured settings included.
  const Profile back = ParseProfile(ProfileToJson(m), "measured.json");
  for (size_t i = 0; i < m.rules.size(); ++i)
    EXPECT_EQ(DescribeNcclSettings(back.rules[i].nccl), DescribeNcclSettings(m.rules[i].nccl)) << i;
  EXPECT_NE(log.str().find("not run: NCCL: no algorithm available"), std::string::npos) << log.str();
}

TEST(NcclAxis, AnotherCommunicatorSizeGetsItsOwnRules) {
  const Profile p = LoadProfile(kSource + "/profiles/dgx_h100.profile.json");  // 16 ranks on 2 nodes
  FakeNccl fake;
  NcclAxisOptions o;
  o.ranks = 8;
  o.nodes = 1;
  std::ostringstream log;
  const Profile m = MeasureNcclAxis(p, o, std::ref(fake), log);
  EXPECT_EQ(fake.calls["NCCL's own"], 5);
  ASSERT_EQ(m.communicators.size(), 1u);
  EXPECT_EQ(m.communicators[0].ranks, 8);
  EXPECT_EQ(m.communicators[0].nodes, 1);
  ASSERT_EQ(m.communicators[0].rules.size(), SizeBands().size());
  EXPECT_EQ(m.communicators[0].rules[0].nccl.algo, "tree");
  for (size_t i = 0; i < p.rules.size(); ++i) EXPECT_TRUE(m.rules[i].nccl.Empty()) << "the world's rules stay";
  const Profile back = ParseProfile(ProfileToJson(m), "tp.json");
  const std::vector<ProfileRule>* tp = RulesForCommunicator(back, 8, 1);
  ASSERT_NE(tp, nullptr);
  EXPECT_TRUE(NcclTunerChoiceFor((*tp)[0]).apply);
  EXPECT_EQ(RulesForCommunicator(back, 8, 2), nullptr);
  // Measured again: the same entry is updated, not a second one added.
  const Profile again = MeasureNcclAxis(back, o, std::ref(fake), log);
  EXPECT_EQ(again.communicators.size(), 1u);
  o.nodes = 3;
  EXPECT_THROW(MeasureNcclAxis(p, o, std::ref(fake), log), UsageError);  // 8 ranks on 3 nodes
}

TEST(NcclAxis, WhereNcclDoesNotRunNothingIsWrittenAndTheProfileStays) {
  const Profile p = LoadProfile(kSource + "/profiles/dgx_h100.profile.json");
  std::ostringstream log;
  auto none = [](const NcclSettings&, uint64_t, std::string* failure) {
    *failure = "no GPU";
    return std::numeric_limits<double>::infinity();
  };
  try {
    MeasureNcclAxis(p, NcclAxisOptions{}, none, log);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("did not run on 16 ranks here (no GPU)"), std::string::npos) << e.what();
  }
  // ciuic-tune nccl-axis here (no GPU): one line, exit 1, the profile byte-identical.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ciuic_nccl_axis_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path copy = dir / "h100.profile.json";
  fs::copy_file(kSource + "/profiles/dgx_h100.profile.json", copy);
  const std::string before = ReadTextFile(copy.string(), "profile");
  Profile cpu = p;
  cpu.device = "cpu";
  WriteProfile((dir / "cpu.profile.json").string(), cpu);
  struct Case {
    std::string args, says;
  } cases[] = {
      {"--profile " + copy.string(), "NCCL's allreduce did not run"},
      {"--profile " + (dir / "cpu.profile.json").string() + " --out " + (dir / "x.json").string(),
       "tuned for CPU ranks"},
      {"--profile " + copy.string() + " --nccl-channels 0", "--nccl-channels"},
      {"--profile " + copy.string() + " --ranks 2x", "--ranks"},
      {"--profile " + copy.string() + " --codecs int8", "--codecs"},
      {"", "--profile FILE is required"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const fs::path err = dir / "err.txt";
    const int status =
        std::system((std::string(CIUIC_TUNE_EXE) + " nccl-axis " + c.args + " >/dev/null 2>" + err.string()).c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1);
    const std::string text = ReadTextFile(err.string(), "stderr");
    EXPECT_NE(text.find(c.says), std::string::npos) << text;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  }
  EXPECT_EQ(ReadTextFile(copy.string(), "profile"), before);
  EXPECT_FALSE(fs::exists(dir / "x.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ciuic
