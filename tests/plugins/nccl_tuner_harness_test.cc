// libnccl-tuner-ciuic.so driven the way NCCL drives it, without NCCL or a GPU: dlopen(RTLD_NOW |
// RTLD_LOCAL) of the built library (NCCL 2.28's flags), dlsym of each ncclTunerPlugin_vN, init with a
// communicator's ranks and nodes and a logger that keeps NCCL's lines, getCollInfo on cost tables
// shaped and filled like NCCL's (float[algorithms][protocols] in us, -1 where NCCL will not run a
// pair), finalize. Profiles: tests/data/plugins/, made from the shipped dgx_h100 and dgx_a100 ones.
#include <dlfcn.h>
#include <elf.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/profile.h"
#include "core/sizes.h"
#include "plugins/nccl_tuner/nccl_tuner_abi.h"
#include "tuner/exports/exports.h"

namespace ciuic {
namespace {

namespace abi = nccl_abi;
namespace fs = std::filesystem;

constexpr const char* kLibrary = CIUIC_NCCL_TUNER_PLUGIN;
const std::string kData = CIUIC_PLUGIN_TEST_DATA;
// 16 ranks on 2 nodes: [0,64K) rd, [64K,1M) nccl, [1M,16M) ring, [16M,256M) hier, [256M,inf) ring+int4:
// ciuic's runtime's choices, nothing measured with NCCL.
const std::string kMixed = kData + "/dgx_h100_x2_mixed.profile.json";
// 16 ranks on 2 nodes, NCCL's axis measured: [0,64K) tree/ll, [64K,1M) ring/ll128 with 16 channels,
// [1M,16M) nvls as the model's advice only, [16M,256M) nvls_tree/simple with a 1 MiB chunk,
// [256M,inf) NCCL's own; and communicators of 8 ranks on 1 node: [0,1M) nvls/simple, [1M,inf) ring
// (no protocol) with 24 channels.
const std::string kMeasured = kData + "/../profiles/dgx_h100_nccl_measured.profile.json";

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

// NCCL's logger: everything the plugin says, in order.
struct Line {
  int level;
  unsigned long flags;
  std::string text;
};
std::mutex lines_mutex;
std::vector<Line> lines;

void Record(abi::LogLevel level, unsigned long flags, const char*, int, const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(lines_mutex);
  lines.push_back({level, flags, buf});
}

std::vector<Line> TakeLines() {
  std::lock_guard<std::mutex> lock(lines_mutex);
  return std::exchange(lines, {});
}

std::string Joined(const std::vector<Line>& v) {
  std::string s;
  for (const Line& l : v) s += fmt::format("[{}] {}\n", l.level, l.text);
  return s;
}

int CountContaining(const std::vector<Line>& v, const std::string& needle) {
  return static_cast<int>(
      std::count_if(v.begin(), v.end(), [&](const Line& l) { return l.text.find(needle) != std::string::npos; }));
}

// A cost table as NCCL 2.28 fills it for an allreduce on H100s (alpha-beta per cell, in us): CollNet
// (no SHARP network here) and PAT (allgather/reducescatter only) ignored, NVLS and NVLS-tree with the
// Simple protocol only.
struct Table {
  std::vector<float> cells;
  int algos, protos;
  Table(int a = abi::kNumAlgorithms, int p = abi::kNumProtocols)
      : cells(a * p, abi::kAlgoProtoIgnore), algos(a), protos(p) {}
  float& at(int a, int p) { return cells[a * protos + p]; }
  float at(int a, int p) const { return cells[a * protos + p]; }
  float** raw() { return reinterpret_cast<float**>(cells.data()); }
};

Table NcclLikeTable(uint64_t bytes) {
  struct Cell {
    int algo, proto;
    double lat_us, gbps;
  };
  const Cell cells[] = {
      {abi::kAlgoTree, abi::kProtoLl, 19.6, 6.1},       {abi::kAlgoTree, abi::kProtoLl128, 31.2, 58.0},
      {abi::kAlgoTree, abi::kProtoSimple, 44.5, 71.3},  {abi::kAlgoRing, abi::kProtoLl, 24.8, 8.4},
      {abi::kAlgoRing, abi::kProtoLl128, 41.0, 88.2},   {abi::kAlgoRing, abi::kProtoSimple, 61.7, 109.6},
      {abi::kAlgoNvls, abi::kProtoSimple, 29.9, 139.4}, {abi::kAlgoNvlsTree, abi::kProtoSimple, 41.1, 118.5}};
  Table t;
  for (const Cell& c : cells) t.at(c.algo, c.proto) = static_cast<float>(c.lat_us + bytes / (c.gbps * 1e3));
  return t;
}

// The cell of row `algo` NCCL would pick among that algorithm's protocols; -1 when it runs none.
int CheapestProto(const Table& t, int algo) {
  int best = -1;
  for (int p = 0; p < t.protos; ++p)
    if (t.at(algo, p) >= 0 && (best < 0 || t.at(algo, p) < t.at(algo, best))) best = p;
  return best;
}

// Cells that differ between two tables.
std::vector<std::pair<int, int>> Changed(const Table& before, const Table& after) {
  std::vector<std::pair<int, int>> v;
  for (int a = 0; a < before.algos; ++a)
    for (int p = 0; p < before.protos; ++p)
      if (before.at(a, p) != after.at(a, p)) v.emplace_back(a, p);
  return v;
}

class Plugin {
 public:
  Plugin() : handle_(dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL)) {}
  ~Plugin() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  void* handle() const { return handle_; }
  template <class T>
  const T* Get(const char* symbol) const {
    return static_cast<const T*>(dlsym(handle_, symbol));
  }

 private:
  void* handle_;
};

class NcclTunerPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(plugin_.handle(), nullptr) << kLibrary << ": " << dlerror();
    v5_ = plugin_.Get<abi::TunerV5>("ncclTunerPlugin_v5");
    ASSERT_NE(v5_, nullptr);
    const char* old = std::getenv("CIUIC_PROFILE");
    had_profile_ = old != nullptr;
    if (had_profile_) old_profile_ = old;
    dir_ = fs::temp_directory_path() / ("ciuic_nccl_tuner_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    TakeLines();
  }
  void TearDown() override {
    if (had_profile_)
      setenv("CIUIC_PROFILE", old_profile_.c_str(), 1);
    else
      unsetenv("CIUIC_PROFILE");
    fs::remove_all(dir_);
  }

  // init through v5 as NCCL 2.28 calls it; the constants and NVLink domains must come back as given.
  void* InitV5(const std::string& profile, size_t ranks, size_t nodes) {
    setenv("CIUIC_PROFILE", profile.c_str(), 1);
    abi::TunerConstantsV5 constants;
    for (size_t i = 0; i < sizeof constants / sizeof(double); ++i) reinterpret_cast<double*>(&constants)[i] = 0.5 + i;
    const abi::TunerConstantsV5 given = constants;
    abi::NvlDomainInfoV5 nvl{static_cast<int>(nodes), static_cast<int>(ranks / nodes), static_cast<int>(ranks / nodes)};
    void* ctx = reinterpret_cast<void*>(0x1);  // NCCL's tunerContext starts as whatever; init must set it
    EXPECT_EQ(v5_->init(&ctx, 0x5eedc0ffeeull, ranks, nodes, Record, &nvl, &constants), abi::kSuccess);
    EXPECT_EQ(std::memcmp(&constants, &given, sizeof constants), 0) << "the plugin changed NCCL's model constants";
    EXPECT_EQ(nvl.n_nvl_domains, static_cast<int>(nodes));
    return ctx;
  }

  // One getCollInfo through v5 on a copy of `t`; returns the table after it and checks nChannels.
  Table Call(void* ctx, abi::Func coll, uint64_t bytes, Table t, int want_channels = 0) {
    int channels = 0;  // NCCL passes 0 and keeps its own count while it stays 0
    EXPECT_EQ(v5_->get_coll_info(ctx, coll, bytes, 1, t.raw(), t.algos, t.protos, 0, &channels), abi::kSuccess);
    EXPECT_EQ(channels, want_channels);
    return t;
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  Plugin plugin_;
  const abi::TunerV5* v5_ = nullptr;
  bool had_profile_ = false;
  std::string old_profile_;
  fs::path dir_;
};

// The defined, global, default-visibility names of the library's dynamic symbol table (what dlsym
// can find), read from the ELF file itself.
std::set<std::string> ExportedSymbols(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string elf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::set<std::string> names;
  if (elf.size() < sizeof(Elf64_Ehdr)) return names;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(elf.data());
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(elf.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM) continue;
    const char* strtab = elf.data() + sh[sh[i].sh_link].sh_offset;
    const auto* sym = reinterpret_cast<const Elf64_Sym*>(elf.data() + sh[i].sh_offset);
    for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k)
      if (sym[k].st_shndx != SHN_UNDEF && ELF64_ST_BIND(sym[k].st_info) != STB_LOCAL &&
          ELF64_ST_VISIBILITY(sym[k].st_other) == STV_DEFAULT && sym[k].st_name != 0)
        names.insert(strtab + sym[k].st_name);
  }
  return names;
}

TEST_F(NcclTunerPlugin, ExportsEveryInterfaceNccl219To230LooksUpAndNothingElse) {
  EXPECT_EQ(fs::path(kLibrary).filename(), "libnccl-tuner-ciuic.so");
  const auto* v6 = plugin_.Get<abi::TunerV6>("ncclTunerPlugin_v6");
  const auto* v4 = plugin_.Get<abi::TunerV4>("ncclTunerPlugin_v4");
  const auto* v3 = plugin_.Get<abi::TunerV3>("ncclTunerPlugin_v3");
  const auto* v2 = plugin_.Get<abi::TunerV2>("ncclTunerPlugin_v2");
  const auto* v1 = plugin_.Get<abi::TunerV1>("ncclTunerPlugin_v1");
  ASSERT_TRUE(v6 && v4 && v3 && v2 && v1);
  for (const char* name : {v6->name, v5_->name, v4->name, v3->name, v2->name, v1->name}) EXPECT_STREQ(name, "ciuic");
  EXPECT_TRUE(v6->init && v6->get_coll_info && v6->finalize && v6->get_chunk_size);
  EXPECT_TRUE(v5_->init && v5_->get_coll_info && v5_->finalize);
  EXPECT_TRUE(v4->init && v4->get_coll_info && v4->destroy);
  EXPECT_TRUE(v3->init && v3->get_coll_info && v3->destroy);
  EXPECT_TRUE(v2->init && v2->get_coll_info && v2->destroy);
  EXPECT_TRUE(v1->init && v1->get_coll_info && v1->destroy);
  // The profile reader, fmt and libstdc++ pieces linked in stay local: another copy in the process
  // (libciuic, a framework) cannot be interposed or interpose.
  const std::set<std::string> expected = {"ncclTunerPlugin_v1", "ncclTunerPlugin_v2", "ncclTunerPlugin_v3",
                                          "ncclTunerPlugin_v4", "ncclTunerPlugin_v5", "ncclTunerPlugin_v6"};
  EXPECT_EQ(ExportedSymbols(kLibrary), expected);
}

// What the dynamic linker of another system needs to load the plugin, read from the ELF file: the
// DT_NEEDED libraries and every symbol version in the version-needs section.
struct DynamicNeeds {
  std::set<std::string> libraries;
  std::set<std::string> versions;  // "GLIBC_2.14", "GLIBCXX_3.4.29", ...
};
DynamicNeeds ReadDynamicNeeds(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string elf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  DynamicNeeds out;
  if (elf.size() < sizeof(Elf64_Ehdr)) return out;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(elf.data());
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(elf.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    const char* strtab = elf.data() + sh[sh[i].sh_link].sh_offset;
    if (sh[i].sh_type == SHT_DYNAMIC) {
      const auto* d = reinterpret_cast<const Elf64_Dyn*>(elf.data() + sh[i].sh_offset);
      for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Dyn) && d[k].d_tag != DT_NULL; ++k)
        if (d[k].d_tag == DT_NEEDED) out.libraries.insert(strtab + d[k].d_un.d_val);
    }
    if (sh[i].sh_type == SHT_GNU_verneed) {
      const char* at = elf.data() + sh[i].sh_offset;
      for (;;) {
        const auto* vn = reinterpret_cast<const Elf64_Verneed*>(at);
        const char* aux_at = at + vn->vn_aux;
        for (int k = 0; k < vn->vn_cnt; ++k) {
          const auto* vna = reinterpret_cast<const Elf64_Vernaux*>(aux_at);
          out.versions.insert(strtab + vna->vna_name);
          aux_at += vna->vna_next;
        }
        if (vn->vn_next == 0) break;
        at += vn->vn_next;
      }
    }
  }
  return out;
}

// "GLIBC_2.25" -> {2, 25}.
std::pair<int, int> GlibcVersion(const std::string& v) {
  int major = 0, minor = 0;
  std::sscanf(v.c_str(), "GLIBC_%d.%d", &major, &minor);
  return {major, minor};
}

// The plugin loads where PyTorch's manylinux_2_28 wheels run: only the C library's own objects as
// dependencies (no libstdc++, libgcc_s or libfmt: linked in statically), and no glibc symbol version
// newer than 2.28 (docs/nccl-plugin.md states the floor).
TEST_F(NcclTunerPlugin, DependsOnlyOnTheCLibraryAndNeedsNoGlibcNewerThan228) {
  const DynamicNeeds needs = ReadDynamicNeeds(kLibrary);
  ASSERT_FALSE(needs.libraries.empty());
  const std::set<std::string> allowed = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2",
                                         "ld-linux-x86-64.so.2"};
  for (const std::string& lib : needs.libraries) EXPECT_TRUE(allowed.count(lib)) << "depends on " << lib;
  ASSERT_FALSE(needs.versions.empty());
  std::pair<int, int> newest{0, 0};
  for (const std::string& v : needs.versions) {
    EXPECT_EQ(v.rfind("GLIBC_", 0), 0u) << "needs " << v << " (only glibc's versions may be needed)";
    if (v.rfind("GLIBC_2.", 0) == 0) newest = std::max(newest, GlibcVersion(v));
  }
  EXPECT_LE(newest, std::make_pair(2, 28)) << fmt::format("needs GLIBC_{}.{}", newest.first, newest.second);
  EXPECT_GE(newest, std::make_pair(2, 2));
}

// The table cell a band's measured algorithm/protocol names becomes 0; an algorithm alone takes its
// cheapest runnable protocol; channels come back through nChannels; nothing else changes.
TEST_F(NcclTunerPlugin, V5AppliesOnlyChoicesMeasuredWithNccl) {
  void* ctx = InitV5(kMeasured, 16, 2);
  ASSERT_NE(ctx, nullptr);
  const std::vector<Line> init = TakeLines();
  EXPECT_EQ(CountContaining(init, "3 of 5 bands carry a choice measured with NCCL"), 1) << Joined(init);
  EXPECT_EQ(CountContaining(init, "allreduce [0, 64K) nccl, codec none, fp32 -> tree/ll: measured 21.5 us"), 1)
      << Joined(init);
  EXPECT_EQ(CountContaining(init, "-> left to NCCL: nvls is the cost model's advice"), 1) << Joined(init);
  for (const Line& l : init) EXPECT_EQ(l.level, abi::kLogInfo) << l.text;

  struct Case {
    abi::Func coll;
    uint64_t bytes;
    int algo, proto;     // the cell that must become 0; -1: table untouched
    int channels;        // nChannels after the call
    const char* logged;  // the first call's line
  } cases[] = {
      {abi::kFuncAllReduce, 8 * kKiB, abi::kAlgoTree, abi::kProtoLl, 0, "-> Tree/LL, NCCL's"},
      {abi::kFuncAllReduce, 0, abi::kAlgoTree, abi::kProtoLl, 0, nullptr},  // a band's lower edge is in it
      {abi::kFuncAllReduce, 256 * kKiB, abi::kAlgoRing, abi::kProtoLl128, 16, "Ring/LL128"},
      {abi::kFuncAllReduce, 1 * kMiB - 4, abi::kAlgoRing, abi::kProtoLl128, 16, nullptr},
      {abi::kFuncAllReduce, 4 * kMiB, -1, -1, 0, "nvls is the cost model's advice"},
      {abi::kFuncAllReduce, 64 * kMiB, abi::kAlgoNvlsTree, abi::kProtoSimple, 0, "NVLSTree/Simple"},
      {abi::kFuncAllReduce, 512 * kMiB, -1, -1, 0, "keeps NCCL's own allreduce"},
      {abi::kFuncAllGather, 4 * kMiB, -1, -1, 0, "AllGather of 4194304 bytes, the first: no rule"},
      {abi::kFuncBroadcast, 8 * kKiB, -1, -1, 0, "Broadcast"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("coll {} bytes {}", static_cast<int>(c.coll), c.bytes));
    Table before = NcclLikeTable(c.bytes);
    Table after = Call(ctx, c.coll, c.bytes, before, c.channels);
    const auto changed = Changed(before, after);
    if (c.algo < 0) {
      EXPECT_TRUE(changed.empty());
    } else {
      ASSERT_EQ(changed.size(), 1u);
      EXPECT_EQ(changed[0], std::make_pair(c.algo, c.proto));
      EXPECT_EQ(after.at(c.algo, c.proto), 0.0f);
    }
    const std::vector<Line> got = TakeLines();
    if (c.logged) {
      EXPECT_EQ(CountContaining(got, c.logged), 1) << Joined(got);
      EXPECT_EQ(got.size(), 1u) << Joined(got);
    } else {
      EXPECT_TRUE(got.empty()) << "a band's first call is logged once:\n" << Joined(got);
    }
  }
  EXPECT_EQ(v5_->finalize(ctx), abi::kSuccess);
  EXPECT_TRUE(TakeLines().empty());
}

// ciuic's runtime's choices (its ring, rd, hier, codecs, NCCL's allreduce kept as is) say nothing
// about NCCL's own algorithms: a profile of them changes no cell, for any size or collective.
TEST_F(NcclTunerPlugin, ARuntimeProfileWithoutNcclMeasurementsChangesNothing) {
  void* ctx = InitV5(kMixed, 16, 2);
  const std::vector<Line> init = TakeLines();
  EXPECT_EQ(CountContaining(init, "0 of 5 bands carry a choice measured with NCCL"), 1) << Joined(init);
  EXPECT_EQ(CountContaining(init, "ring is ciuic's runtime's algorithm; no measurement of NCCL's"), 1) << Joined(init);
  EXPECT_EQ(CountContaining(init, "hier is ciuic's runtime's algorithm"), 1) << Joined(init);
  EXPECT_EQ(CountContaining(init, "ring with codec int4 runs in ciuic's runtime"), 1) << Joined(init);
  for (const uint64_t bytes : {8 * kKiB, 256 * kKiB, 4 * kMiB, 64 * kMiB, 1 * kGiB})
    for (const abi::Func f : {abi::kFuncAllReduce, abi::kFuncAllGather}) {
      Table t = NcclLikeTable(bytes);
      EXPECT_TRUE(Changed(t, Call(ctx, f, bytes, t)).empty()) << bytes;
    }
  EXPECT_EQ(v5_->finalize(ctx), abi::kSuccess);
}

TEST_F(NcclTunerPlugin, OnlyCellsNcclRunsAreEverPreferred) {
  // A measured protocol NCCL does not run here (NCCL_PROTO=^LL): nothing is revived, one line says so.
  void* ctx = InitV5(kMeasured, 16, 2);
  TakeLines();
  Table no_ll = NcclLikeTable(8 * kKiB);
  no_ll.at(abi::kAlgoTree, abi::kProtoLl) = abi::kAlgoProtoIgnore;
  EXPECT_TRUE(Changed(no_ll, Call(ctx, abi::kFuncAllReduce, 8 * kKiB, no_ll)).empty());
  EXPECT_TRUE(Changed(no_ll, Call(ctx, abi::kFuncAllReduce, 16 * kKiB, no_ll)).empty());
  std::vector<Line> got = TakeLines();
  EXPECT_EQ(CountContaining(got, "NCCL does not run Tree/LL here"), 1) << Joined(got);
  EXPECT_EQ(got.size(), 1u) << Joined(got);
  EXPECT_EQ(v5_->finalize(ctx), abi::kSuccess);
  // An algorithm measured without a protocol (the 8-rank communicator's [1M, inf) ring): its cheapest
  // runnable cell, here LL128 once Simple is disabled; all of Ring disabled: nothing.
  ctx = InitV5(kMeasured, 8, 1);
  TakeLines();
  Table no_simple = NcclLikeTable(8 * kMiB);
  no_simple.at(abi::kAlgoRing, abi::kProtoSimple) = abi::kAlgoProtoIgnore;
  Table after = Call(ctx, abi::kFuncAllReduce, 8 * kMiB, no_simple, 24);
  ASSERT_EQ(Changed(no_simple, after).size(), 1u);
  EXPECT_EQ(after.at(abi::kAlgoRing, abi::kProtoLl128), 0.0f);
  EXPECT_EQ(after.at(abi::kAlgoRing, abi::kProtoSimple), abi::kAlgoProtoIgnore);
  Table no_ring = NcclLikeTable(32 * kMiB);
  for (int p = 0; p < abi::kNumProtocols; ++p) no_ring.at(abi::kAlgoRing, p) = abi::kAlgoProtoIgnore;
  EXPECT_TRUE(Changed(no_ring, Call(ctx, abi::kFuncAllReduce, 32 * kMiB, no_ring, 24)).empty());
  EXPECT_EQ(v5_->finalize(ctx), abi::kSuccess);
}

// Any table NCCL may hand over: random costs, random pairs ignored, any collective and size. The
// invariants: a -1 is never written, at most one cell changes, only to 0, only the measured cell (or
// the measured algorithm's cheapest runnable one); everything outside a measured band is untouched.
TEST_F(NcclTunerPlugin, RandomTablesKeepNcclsInvariants) {
  void* ctx = InitV5(kMeasured, 16, 2);
  const unsigned seed = 20261126;  // fixed: a failure replays
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(0.0, std::log2(2.0 * kGiB)), cost(0.2, 9000.0), unit(0.0, 1.0);
  std::uniform_int_distribution<int> coll(abi::kFuncBroadcast, abi::kFuncAllReduce);
  int preferred = 0;
  for (int i = 0; i < 5000; ++i) {
    const uint64_t bytes = static_cast<uint64_t>(std::exp2(log_size(rng)));
    const auto func = static_cast<abi::Func>(unit(rng) < 0.6 ? abi::kFuncAllReduce : coll(rng));
    Table before;
    for (float& c : before.cells) c = unit(rng) < 0.35 ? abi::kAlgoProtoIgnore : static_cast<float>(cost(rng));
    int algo = -1, proto = -1, channels = 0;
    if (func == abi::kFuncAllReduce && bytes < 64 * kKiB) algo = abi::kAlgoTree, proto = abi::kProtoLl;
    if (func == abi::kFuncAllReduce && bytes >= 64 * kKiB && bytes < 1 * kMiB)
      algo = abi::kAlgoRing, proto = abi::kProtoLl128, channels = 16;
    if (func == abi::kFuncAllReduce && bytes >= 16 * kMiB && bytes < 256 * kMiB)
      algo = abi::kAlgoNvlsTree, proto = abi::kProtoSimple;
    Table after = Call(ctx, func, bytes, before, channels);
    const auto changed = Changed(before, after);
    if (algo < 0 || before.at(algo, proto) < 0) {
      ASSERT_TRUE(changed.empty()) << "bytes " << bytes << " func " << func;
    } else {
      ASSERT_EQ(changed.size(), 1u) << "bytes " << bytes;
      ASSERT_EQ(changed[0], std::make_pair(algo, proto));
      ASSERT_EQ(after.at(algo, proto), 0.0f);
      ++preferred;
    }
  }
  EXPECT_GT(preferred, 300);
  EXPECT_EQ(v5_->finalize(ctx), abi::kSuccess);
}

TEST_F(NcclTunerPlugin, OneCommunicatorCalledFromTwoThreadsLogsEachBandOnce) {
  void* ctx = InitV5(kMeasured, 16, 2);
  TakeLines();
  auto work = [&] {
    for (int i = 0; i < 2000; ++i) {
      Table t = NcclLikeTable(128 * kKiB + i);
      int channels = 0;
      v5_->get_coll_info(ctx, abi::kFuncAllReduce, 128 * kKiB + i, 1, t.raw(), t.algos, t.protos, 0, &channels);
      v5_->get_coll_info(ctx, abi::kFuncAllGather, 128 * kKiB + i, 1, t.raw(), t.algos, t.protos, 0, &channels);
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  const std::vector<Line> got = TakeLines();
  EXPECT_EQ(got.size(), 2u) << Joined(got);
  EXPECT_EQ(CountContaining(got, "the first in allreduce [64K, 1M)"), 1) << Joined(got);
  EXPECT_EQ(v5_->finalize(ctx), abi::kSuccess);
}

// Per communicator: the world's rules for 16 ranks on 2 nodes, the `communicators` entry's for 8 ranks
// on 1 node (a tensor-parallel group), NCCL's own choices for every other size.
TEST_F(NcclTunerPlugin, EachCommunicatorSizeGetsItsOwnRulesAndOthersAreLeftToNccl) {
  void* tp = InitV5(kMeasured, 8, 1);
  std::vector<Line> init = TakeLines();
  EXPECT_EQ(CountContaining(init, "2 of 2 bands carry a choice measured with NCCL"), 1) << Joined(init);
  Table small = NcclLikeTable(256 * kKiB);
  EXPECT_EQ(Changed(small, Call(tp, abi::kFuncAllReduce, 256 * kKiB, small)),
            (std::vector<std::pair<int, int>>{{abi::kAlgoNvls, abi::kProtoSimple}}));
  Table big = NcclLikeTable(64 * kMiB);
  EXPECT_EQ(Changed(big, Call(tp, abi::kFuncAllReduce, 64 * kMiB, big, 24)),
            (std::vector<std::pair<int, int>>{{abi::kAlgoRing, CheapestProto(big, abi::kAlgoRing)}}));
  EXPECT_EQ(v5_->finalize(tp), abi::kSuccess);
  TakeLines();
  for (const auto& [ranks, nodes] : {std::pair<size_t, size_t>{16, 1}, {32, 2}, {2, 2}, {8, 2}}) {
    SCOPED_TRACE(fmt::format("{} ranks on {} nodes", ranks, nodes));
    void* ctx = InitV5(kMeasured, ranks, nodes);
    init = TakeLines();
    ASSERT_EQ(init.size(), 1u) << Joined(init);
    EXPECT_EQ(init[0].level, abi::kLogInfo);
    EXPECT_NE(init[0].text.find("has rules for 16 ranks on 2 node(s), 8 ranks on 1 node(s): every choice is left to "
                                "NCCL"),
              std::string::npos)
        << init[0].text;
    for (const uint64_t bytes : {4 * kKiB, 256 * kKiB, 64 * kMiB, 1 * kGiB}) {
      Table t = NcclLikeTable(bytes);
      EXPECT_TRUE(Changed(t, Call(ctx, abi::kFuncAllReduce, bytes, t)).empty());
    }
    EXPECT_TRUE(TakeLines().empty());
    EXPECT_EQ(v5_->finalize(ctx), abi::kSuccess);
  }
}

// v6 (NCCL 2.30): the cost table as v5, and the chunk size measured for a band, only when NCCL runs
// the band's measured algorithm and protocol.
TEST_F(NcclTunerPlugin, V6SetsTheMeasuredChunkSizeAndNothingElse) {
  const auto* v6 = plugin_.Get<abi::TunerV6>("ncclTunerPlugin_v6");
  ASSERT_NE(v6, nullptr);
  setenv("CIUIC_PROFILE", kMeasured.c_str(), 1);
  void* ctx = nullptr;
  ASSERT_EQ(v6->init(&ctx, 0x77, 16, 2, Record, nullptr, nullptr), abi::kSuccess);
  ASSERT_NE(ctx, nullptr);
  TakeLines();
  Table t = NcclLikeTable(64 * kMiB), before = t;
  int channels = 0;
  ASSERT_EQ(v6->get_coll_info(ctx, abi::kFuncAllReduce, 64 * kMiB, 1, t.raw(), t.algos, t.protos, 0, &channels),
            abi::kSuccess);
  EXPECT_EQ(Changed(before, t), (std::vector<std::pair<int, int>>{{abi::kAlgoNvlsTree, abi::kProtoSimple}}));
  struct Case {
    abi::Func coll;
    uint64_t bytes;
    int algo, proto;
    size_t want;
  } cases[] = {
      {abi::kFuncAllReduce, 64 * kMiB, abi::kAlgoNvlsTree, abi::kProtoSimple, 1 * kMiB},  // measured
      {abi::kFuncAllReduce, 64 * kMiB, abi::kAlgoRing, abi::kProtoSimple, 131072},        // NCCL chose another
      {abi::kFuncAllReduce, 256 * kKiB, abi::kAlgoRing, abi::kProtoLl128, 131072},        // no chunk measured
      {abi::kFuncAllReduce, 1 * kGiB, abi::kAlgoRing, abi::kProtoSimple, 131072},         // NCCL's own band
      {abi::kFuncAllGather, 64 * kMiB, abi::kAlgoNvlsTree, abi::kProtoSimple, 131072},    // no rule
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} bytes algo {} proto {}", c.bytes, c.algo, c.proto));
    size_t chunk = 131072;  // NCCL's computed value
    ASSERT_EQ(v6->get_chunk_size(ctx, c.coll, c.bytes, c.algo, c.proto, 16, &chunk), abi::kSuccess);
    EXPECT_EQ(chunk, c.want);
  }
  EXPECT_EQ(v6->get_chunk_size(ctx, abi::kFuncAllReduce, 64 * kMiB, abi::kAlgoNvlsTree, abi::kProtoSimple, 16, nullptr),
            abi::kSuccess);
  EXPECT_EQ(v6->get_chunk_size(nullptr, abi::kFuncAllReduce, 64 * kMiB, 0, 0, 16, nullptr), abi::kSuccess);
  const std::vector<Line> got = TakeLines();
  EXPECT_EQ(CountContaining(got, "-> chunk 1048576 bytes (NCCL's 131072)"), 1) << Joined(got);
  EXPECT_EQ(v6->finalize(ctx), abi::kSuccess);
}

// NCCL fails the communicator when a tuner's init returns an error (2.19-2.30), so every bad
// profile is one WARN line naming the problem and a plugin that changes nothing.
TEST_F(NcclTunerPlugin, AMissingOrBrokenProfileIsOneWarningAndNcclRunsOn) {
  const std::string good = [] {
    std::ifstream f(kMeasured);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }();
  std::string unknown_key = good;
  unknown_key.replace(unknown_key.find("\"streams\""), 9, "\"stream\"");
  std::string bad_proto = good;
  bad_proto.replace(bad_proto.find("\"ll128\""), 7, "\"ll64\"");
  struct Case {
    const char* what;
    std::string path;  // "(unset)": CIUIC_PROFILE not in the environment
    const char* says;
  } cases[] = {
      {"unset", "(unset)", "CIUIC_PROFILE is not set"},
      {"empty value", "", "CIUIC_PROFILE is not set"},
      {"no such file", (dir_ / "missing.json").string(), "cannot read profile"},
      {"a directory", dir_.string(), "a directory, not a regular file"},
      {"empty file", WriteFile("empty.json", ""), "not valid JSON"},
      {"truncated", WriteFile("cut.json", good.substr(0, good.size() / 2)), "not valid JSON"},
      {"binary junk",
       WriteFile("junk.json", std::string("\x7f"
                                          "ELF\x02\x01\x01\0\0\xff",
                                          10)),
       "not valid JSON"},
      {"unknown key", WriteFile("key.json", unknown_key), "rules[0].stream: unknown key"},
      {"unknown protocol", WriteFile("proto.json", bad_proto), "nccl.proto"},
      {"newer schema", kData + "/newer_schema.profile.json", "is newer than this build reads"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    void* ctx = nullptr;
    if (c.path == "(unset)") {
      unsetenv("CIUIC_PROFILE");
      EXPECT_EQ(v5_->init(&ctx, 1, 16, 2, Record, nullptr, nullptr), abi::kSuccess);
    } else {
      ctx = InitV5(c.path, 16, 2);
    }
    const std::vector<Line> init = TakeLines();
    ASSERT_EQ(init.size(), 1u) << Joined(init);
    EXPECT_EQ(init[0].level, abi::kLogWarn);
    EXPECT_NE(init[0].text.find("every choice is left to NCCL"), std::string::npos) << init[0].text;
    EXPECT_NE(init[0].text.find(c.says), std::string::npos) << init[0].text;
    for (const uint64_t bytes : {4 * kKiB, 256 * kKiB, 64 * kMiB}) {
      Table t = NcclLikeTable(bytes);
      EXPECT_TRUE(Changed(t, Call(ctx, abi::kFuncAllReduce, bytes, t)).empty());
    }
    EXPECT_EQ(v5_->finalize(ctx), abi::kSuccess);
    EXPECT_TRUE(TakeLines().empty());
  }
  // No logger at all (a caller passing none) and a null context from NCCL: still nothing breaks.
  setenv("CIUIC_PROFILE", (dir_ / "missing.json").c_str(), 1);
  void* ctx = nullptr;
  EXPECT_EQ(v5_->init(&ctx, 1, 8, 1, nullptr, nullptr, nullptr), abi::kSuccess);
  Table t = NcclLikeTable(4 * kMiB);
  int channels = 0;
  EXPECT_EQ(v5_->get_coll_info(nullptr, abi::kFuncAllReduce, 4 * kMiB, 1, t.raw(), t.algos, t.protos, 0, &channels),
            abi::kSuccess);
  EXPECT_EQ(v5_->finalize(ctx), abi::kSuccess);
  EXPECT_EQ(v5_->finalize(nullptr), abi::kSuccess);
}

// v4 (2.24-2.27) and v3 (2.22-2.23) behave as v5; v3 on the 6-algorithm table of 2.22 (no PAT).
TEST_F(NcclTunerPlugin, V4AndV3ApplyTheProfileLikeV5) {
  const auto* v4 = plugin_.Get<abi::TunerV4>("ncclTunerPlugin_v4");
  const auto* v3 = plugin_.Get<abi::TunerV3>("ncclTunerPlugin_v3");
  ASSERT_TRUE(v4 && v3);
  setenv("CIUIC_PROFILE", kMeasured.c_str(), 1);
  void* ctx4 = nullptr;
  ASSERT_EQ(v4->init(16, 2, Record, &ctx4), abi::kSuccess);
  ASSERT_NE(ctx4, nullptr);
  EXPECT_EQ(CountContaining(TakeLines(), "3 of 5 bands carry a choice measured with NCCL"), 1);
  Table t = NcclLikeTable(256 * kKiB), before = t;
  int channels = 0;
  ASSERT_EQ(v4->get_coll_info(ctx4, abi::kFuncAllReduce, 256 * kKiB, 3, t.raw(), t.algos, t.protos, 1, &channels),
            abi::kSuccess);
  EXPECT_EQ(Changed(before, t), (std::vector<std::pair<int, int>>{{abi::kAlgoRing, abi::kProtoLl128}}));
  EXPECT_EQ(channels, 16);
  // The advice-only band and NCCL's own band: untouched.
  for (const auto& [bytes, says] :
       {std::pair<uint64_t, const char*>{4 * kMiB, "cost model's advice"}, {1 * kGiB, "keeps NCCL's own"}}) {
    Table u = NcclLikeTable(bytes), u0 = u;
    channels = 0;
    ASSERT_EQ(v4->get_coll_info(ctx4, abi::kFuncAllReduce, bytes, 1, u.raw(), u.algos, u.protos, 0, &channels),
              abi::kSuccess);
    EXPECT_TRUE(Changed(u0, u).empty());
    EXPECT_EQ(channels, 0);
    EXPECT_EQ(CountContaining(TakeLines(), says), 1) << says;
  }
  EXPECT_EQ(v4->destroy(ctx4), abi::kSuccess);

  void* ctx3 = nullptr;
  ASSERT_EQ(v3->init(16, 2, Record, &ctx3), abi::kSuccess);
  TakeLines();
  Table six(6, abi::kNumProtocols);
  for (int a = 0; a < 6; ++a)
    for (int p = 0; p < abi::kNumProtocols; ++p) six.at(a, p) = NcclLikeTable(8 * kKiB).at(a, p);
  Table six0 = six;
  channels = 0;
  ASSERT_EQ(v3->get_coll_info(ctx3, abi::kFuncAllReduce, 8 * kKiB, 1, six.raw(), 6, abi::kNumProtocols, &channels),
            abi::kSuccess);
  EXPECT_EQ(Changed(six0, six), (std::vector<std::pair<int, int>>{{abi::kAlgoTree, abi::kProtoLl}}));
  EXPECT_EQ(v3->destroy(ctx3), abi::kSuccess);
}

// v2 (NCCL 2.21) and v1 (2.19, 2.20) take an algorithm only with its protocol and see whether NVLS
// and CollNet are possible: a band that measured both gets them, one that measured an algorithm
// alone keeps NCCL's (its channels still apply), an NVLS choice where NCCL cannot run NVLS is dropped.
TEST_F(NcclTunerPlugin, V2AndV1ApplyMeasuredPairsOnly) {
  const auto* v2 = plugin_.Get<abi::TunerV2>("ncclTunerPlugin_v2");
  const auto* v1 = plugin_.Get<abi::TunerV1>("ncclTunerPlugin_v1");
  ASSERT_TRUE(v2 && v1);
  setenv("CIUIC_PROFILE", kMeasured.c_str(), 1);
  struct Case {
    uint64_t bytes;
    int nvls_support;
    int algo, proto, channels;
  } cases[] = {
      {8 * kKiB, 1, abi::kAlgoTree, abi::kProtoLl, 0},
      {256 * kKiB, 1, abi::kAlgoRing, abi::kProtoLl128, 16},
      {4 * kMiB, 1, abi::kAlgoUndef, abi::kProtoUndef, 0},  // advice only
      {64 * kMiB, 1, abi::kAlgoNvlsTree, abi::kProtoSimple, 0},
      {64 * kMiB, 0, abi::kAlgoUndef, abi::kProtoUndef, 0},  // NCCL cannot run NVLS here
      {1 * kGiB, 1, abi::kAlgoUndef, abi::kProtoUndef, 0},
  };
  void* ctx = nullptr;
  ASSERT_EQ(v2->init(16, 2, Record, &ctx), abi::kSuccess);
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(v1->init(16, 2, Record), abi::kSuccess);
  TakeLines();
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} bytes, nvls support {}", c.bytes, c.nvls_support));
    int algo = abi::kAlgoUndef, proto = abi::kProtoUndef, channels = 0;
    ASSERT_EQ(v2->get_coll_info(ctx, abi::kFuncAllReduce, c.bytes, 0, c.nvls_support, 1, &algo, &proto, &channels),
              abi::kSuccess);
    EXPECT_EQ(std::tie(algo, proto, channels), std::tie(c.algo, c.proto, c.channels));
    algo = abi::kAlgoUndef, proto = abi::kProtoUndef, channels = 0;
    ASSERT_EQ(v1->get_coll_info(abi::kFuncAllReduce, c.bytes, 0, c.nvls_support, 1, &algo, &proto, &channels),
              abi::kSuccess);
    EXPECT_EQ(std::tie(algo, proto, channels), std::tie(c.algo, c.proto, c.channels)) << "v1";
  }
  EXPECT_EQ(v2->destroy(ctx), abi::kSuccess);
  EXPECT_EQ(v1->destroy(), abi::kSuccess);
  // The 8-rank communicator's ring measured without a protocol: v2 cannot take it; channels apply.
  ASSERT_EQ(v2->init(8, 1, Record, &ctx), abi::kSuccess);
  TakeLines();
  int algo = abi::kAlgoUndef, proto = abi::kProtoUndef, channels = 0;
  ASSERT_EQ(v2->get_coll_info(ctx, abi::kFuncAllReduce, 64 * kMiB, 0, 1, 1, &algo, &proto, &channels), abi::kSuccess);
  EXPECT_EQ(std::tie(algo, proto, channels), std::make_tuple(abi::kAlgoUndef, abi::kProtoUndef, 24));
  EXPECT_EQ(CountContaining(TakeLines(), "takes an algorithm only with a protocol"), 1);
  EXPECT_EQ(v2->destroy(ctx), abi::kSuccess);
  // After destroy, v1 has no tuner: nothing is set.
  algo = abi::kAlgoUndef, proto = abi::kProtoUndef, channels = 0;
  ASSERT_EQ(v1->get_coll_info(abi::kFuncAllReduce, 8 * kKiB, 0, 1, 1, &algo, &proto, &channels), abi::kSuccess);
  EXPECT_EQ(std::tie(algo, proto, channels), std::make_tuple(abi::kAlgoUndef, abi::kProtoUndef, 0));
}

// `ciuic-tune export --format nccl-tuner`: shell lines naming this library and the profile (run
// through sh), and a line per band that says what the plugin then does.
TEST_F(NcclTunerPlugin, ExportSetsUpThePluginAndDescribesWhatItDoes) {
  const Profile p = LoadProfile(kMeasured);
  const std::string out = ExportProfile(p, "nccl-tuner");
  const std::string script = WriteFile("env.sh", out);
  FILE* sh =
      popen(fmt::format("sh -c '. \"{}\" && printf \"%s\\n%s\\n\" \"$NCCL_TUNER_PLUGIN\" \"$CIUIC_PROFILE\"'", script)
                .c_str(),
            "r");
  ASSERT_NE(sh, nullptr);
  char buf[4096] = {};
  std::string env;
  while (fgets(buf, sizeof buf, sh)) env += buf;
  ASSERT_EQ(pclose(sh), 0) << out;
  std::istringstream lines_in(env);
  std::string lib, profile;
  std::getline(lines_in, lib);
  std::getline(lines_in, profile);
  EXPECT_EQ(fs::canonical(lib), fs::canonical(kLibrary)) << out;
  EXPECT_TRUE(fs::path(profile).is_absolute()) << profile;
  EXPECT_EQ(fs::canonical(profile), fs::canonical(kMeasured));
  EXPECT_NE(out.find("communicators of 16 ranks on 2 node(s):"), std::string::npos) << out;
  EXPECT_NE(out.find("communicators of 8 ranks on 1 node(s):"), std::string::npos) << out;
  EXPECT_NE(out.find("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING"), std::string::npos) << out;

  // Every band's line agrees with what the plugin does at that band's lower edge.
  void* ctx = InitV5(kMeasured, 16, 2);
  for (const ProfileRule& r : p.rules) {
    const uint64_t bytes = std::max<uint64_t>(r.min_bytes, 8);
    Table before = NcclLikeTable(bytes);
    const auto changed =
        Changed(before, Call(ctx, abi::kFuncAllReduce, bytes, before, r.nccl.measured ? r.nccl.channels : 0));
    const std::string band = fmt::format("#   allreduce [{}, {}) {}, codec {}, {} -> ", FormatSize(r.min_bytes),
                                         r.max_bytes ? FormatSize(r.max_bytes) : "inf", r.algo, r.codec, r.precision);
    const size_t at = out.find(band);
    ASSERT_NE(at, std::string::npos) << band << "\n" << out;
    const std::string says = out.substr(at + band.size(), out.find('\n', at) - at - band.size());
    if (changed.empty()) {
      EXPECT_EQ(says.rfind("left to NCCL: ", 0), 0u) << says;
    } else {
      EXPECT_EQ(says.rfind("NCCL " + DescribeNcclSettings(r.nccl) + ": measured", 0), 0u) << says;
    }
  }
  EXPECT_EQ(v5_->finalize(ctx), abi::kSuccess);
}

}  // namespace
}  // namespace ciuic
