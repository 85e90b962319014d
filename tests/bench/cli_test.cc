// ciuic-bench as users run it: bad input gives one line on stderr and exit 1; verification failures
// and missed expectations exit 3; outputs land where asked. CliMpi* tests start real MPI ranks.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fmt/format.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/coll_spec.h"
#include "bench/crossover_table.h"
#include "collectives/profile.h"
#include "collectives/runtime_comm.h"
#include "core/buffer.h"
#include "core/trace.h"
#include "tests/trace_check.h"
#include "tests/traced_ranks.h"

namespace ciuic {
namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs a shell command line; its exit code, stdout and stderr.
Result RunCommand(const std::string& command) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string out = (dir / ("ciuic_cli_out_" + std::to_string(getpid()))).string();
  const std::string err = (dir / ("ciuic_cli_err_" + std::to_string(getpid()))).string();
  const std::string cmd = command + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.out = Slurp(out);
  r.err = Slurp(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

Result RunBenchCli(const std::string& args) { return RunCommand(std::string(CIUIC_BENCH_EXE) + " " + args); }

int CountLines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class BadInput : public testing::TestWithParam<const char*> {};

TEST_P(BadInput, OneLineAndExitOne) {
  const Result r = RunBenchCli(GetParam());
  EXPECT_EQ(r.code, 1) << GetParam() << "\n" << r.err;
  EXPECT_EQ(CountLines(r.err), 1) << GetParam() << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("ciuic-bench: ", 0), 0u) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    Cli, BadInput,
    testing::Values("", "allreducex", "allreduce --sizes 0", "allreduce --sizes 1K:1X", "allreduce --sizes 2K:1K",
                    "allreduce --sizes 1K:1G:x1", "allreduce --sizes=-5", "allreduce --dtype fp4", "allreduce --op xor",
                    "allreduce --backend tcp", "allreduce --device tpu", "allreduce --inplace maybe",
                    "allreduce --format xml", "allreduce --iters 0", "allreduce --iters abc", "allreduce --warmup -1",
                    "allreduce --check -2", "allreduce --ranks 0", "allreduce --timeout -1",
                    "allreduce --expect 'speed>=3'", "allreduce --expect 'busbw>=x'", "allreduce --codec int8",
                    "allreduce --algo ring", "allreduce --no-such-flag", "allreduce extra-arg", "broadcast --root -1",
                    "allreduce --backend local --sizes 1P", "allreduce --backend local --out /no/such/dir/x.json",
                    "allreduce --backend mpi --device cuda", "allreduce --backend local --debug-corrupt x",
                    "compress --codec int9", "compress --codec topk", "compress --codec topk:2",
                    "compress --codec powersgd:0", "compress --block 48", "compress --rounding up",
                    "compress --select best", "compress --sizes 2", "compress --sizes 0", "compress --prescale 0",
                    "compress --ef maybe", "compress --data zeros", "compress --iters 0", "compress --format xml",
                    "compress --device tpu", "compress extra", "kernel", "kernel bogus", "kernel a --tensors 0",
                    "kernel ef-quantize --codec topk:0.1 --sizes 4K", "compress --sizes 64K --out /no/such/dir/x.json",
                    "compress --sizes 1P",
                    // unwritable outputs are refused before the run (nothing on stdout)
                    "allreduce --backend local --out /proc/nonexistent/x.json",
                    "allreduce --backend local --out /proc/ciuic_cli.json", "allreduce --backend local --db /dev/null",
                    "allreduce --backend local --db /proc/ciuic_cli.db", "allreduce --backend local --out /tmp",
                    "compress --sizes 64K --out /proc/ciuic_cli.json"));

// Every value is checked against its range, whatever the backend, and refused in one format naming
// the option and the value: "--OPTION VALUE: PROBLEM" (or the JSON path of a profile's field).
struct BadValueCase {
  std::string args;
  std::string message;  // what stderr starts with after "ciuic-bench: "
};

class BadValue : public testing::TestWithParam<BadValueCase> {};

TEST_P(BadValue, OneLineNamingTheOptionAndExitOne) {
  const BadValueCase& c = GetParam();
  const Result r = RunBenchCli(c.args);
  EXPECT_EQ(r.code, 1) << c.args << "\n" << r.err;
  EXPECT_EQ(CountLines(r.err), 1) << c.args << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("ciuic-bench: " + c.message, 0), 0u) << c.args << "\n" << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

const std::string kCiuic = "allreduce --backend ciuic --transport local --ranks 2 --sizes 1K ";

INSTANTIATE_TEST_SUITE_P(
    Cli, BadValue,
    testing::Values(
        BadValueCase{"allreduce --bucket abc", "--bucket abc: expected a number"},
        BadValueCase{kCiuic + "--bucket abc", "--bucket abc: expected a number"},
        BadValueCase{kCiuic + "--bucket 1", "--bucket 1: must be in 4K..1T bytes"},
        BadValueCase{kCiuic + "--bucket 2T", "--bucket 2T: must be in 4K..1T bytes"},
        BadValueCase{kCiuic + "--bucket=-5", "--bucket -5: negative"},
        BadValueCase{"allreduce --streams -1", "--streams -1: must be in 1..64"},
        BadValueCase{kCiuic + "--streams -1", "--streams -1: must be in 1..64"},
        BadValueCase{kCiuic + "--streams 65", "--streams 65: must be in 1..64"},
        BadValueCase{kCiuic + "--streams 1.5", "--streams 1.5: out of range for this option"},
        BadValueCase{"allreduce --backend local --streams 4", "--streams: applies to --backend ciuic"},
        BadValueCase{"allreduce --backend local --bucket 1M", "--bucket: applies to --backend ciuic"},
        BadValueCase{"allreduce --backend local --trace ''", "--trace '': an empty path"},
        BadValueCase{"allreduce --backend local --trace /no/such/dir/t.json",
                     "--trace '/no/such/dir/t.json': directory '/no/such/dir' does not exist"},
        BadValueCase{"allreduce --backend local --trace /tmp", "--trace '/tmp' is a directory"},
        BadValueCase{"allreduce --backend local --trace /tmp/ciuic_same.json --out /tmp/ciuic_same.json",
                     "--trace '/tmp/ciuic_same.json' and --out '/tmp/ciuic_same.json' name the same file"},
        BadValueCase{"allreduce --backend local --db /tmp/ciuic_same.db --trace /tmp/ciuic_same.db",
                     "--trace '/tmp/ciuic_same.db' and --db '/tmp/ciuic_same.db' name the same file"},
        BadValueCase{"allreduce --backend local --ranks-per-node 2", "--ranks-per-node: applies to --backend ciuic"},
        BadValueCase{kCiuic + "--piece 1K", "--piece 1K: must be in 4K..1T bytes"},
        BadValueCase{kCiuic + "--block 48", "--block 48: must be a multiple of 32 in 32..65536"},
        BadValueCase{"allreduce --block -1", "--block -1: out of range for this option"},
        BadValueCase{kCiuic + "--prescale 0", "--prescale 0: must be a positive finite number"},
        BadValueCase{kCiuic + "--rounding up", "--rounding up: "},
        BadValueCase{kCiuic + "--codec int9", "--codec int9: unknown codec 'int9'"},
        BadValueCase{kCiuic + "--algo hier --ranks-per-node 3",
                     "--ranks-per-node 3: 2 ranks do not split into nodes of 3"},
        BadValueCase{"allreduce --backend ciuic --transport local --ranks 6 --sizes 1K --algo hier --ranks-per-node 4",
                     "--ranks-per-node 4: 6 ranks do not split into nodes of 4"},
        BadValueCase{
            "allreduce --backend ciuic --transport local --ranks 6 --sizes 1K --algo hier --ranks-per-node 2,2",
            "--ranks-per-node 2,2: 3 nodes do not split into groups of 2"},
        BadValueCase{kCiuic + "--ranks-per-node -1", "--ranks-per-node -1: R must be in 0..4096"},
        BadValueCase{kCiuic + "--ranks-per-node 2,x", "--ranks-per-node 2,x: use R or R,G"},
        BadValueCase{"allreduce --iters abc", "--iters abc: not a number"},
        BadValueCase{"allreduce --iters 0", "--iters 0: must be in 1..10000000"},
        BadValueCase{"allreduce --iters 99999999999", "--iters 99999999999: out of range for this option"},
        BadValueCase{"allreduce --warmup -1", "--warmup -1: must be in 0..10000000"},
        BadValueCase{"allreduce --check -2", "--check -2: must be in 0..10000000"},
        BadValueCase{"allreduce --ranks 0", "--ranks 0: must be in 1..4096"},
        BadValueCase{"allreduce --ranks 100000", "--ranks 100000: must be in 1..4096"},
        BadValueCase{"broadcast --root -1", "--root -1: must be in 0..4095"},
        BadValueCase{"broadcast --backend local --ranks 2 --sizes 1K --root 2",
                     "--root 2: must be in 0..1 (a rank of 2)"},
        BadValueCase{"allreduce --seed -1", "--seed -1: out of range for this option"},
        BadValueCase{"allreduce --sizes 0", "--sizes 0: bad size '0': must be positive"},
        BadValueCase{"allreduce --dtype fp4", "--dtype fp4: unknown dtype 'fp4'"},
        BadValueCase{"allreduce --op xor", "--op xor: "}, BadValueCase{"allreduce --average mean", "--average mean: "},
        BadValueCase{"allreduce --no-such-flag", "--no-such-flag: unknown option"},
        BadValueCase{"allreduce --iters", "--iters: needs a value"},
        BadValueCase{"compress --iters abc", "--iters abc: not a number"},
        BadValueCase{"compress --sizes 1X", "--sizes 1X: bad size '1X'"},
        BadValueCase{"kernel all --tensors abc", "--tensors abc: not a number"},
        // A size below one element, or one this host cannot hold, is a value of --sizes.
        BadValueCase{"allreduce --backend local --sizes 2 --dtype fp64",
                     "--sizes 2: 2 B is smaller than one fp64 element (8 B)"},
        BadValueCase{"allreduce --backend local --sizes 1K:1T", "--sizes 1K:1T: size 1T does not fit"},
        BadValueCase{"allreduce --device cpu --ranks 2 --sizes 1T", "--sizes 1T: size 1T does not fit"},
        BadValueCase{"compress --sizes 2", "--sizes 2: 2 B holds no fp32 element"},
        BadValueCase{"compress --sizes 1T", "--sizes 1T: size 1T needs about"},
        BadValueCase{"allreduce --backend local --sizes \"$(printf '1K\\n2K')\"", "--sizes 1K?2K: bad size"},
        // --debug-corrupt names a rank of the world and an element of every row's receive buffer.
        BadValueCase{"allreduce --backend local --sizes 4K --debug-corrupt 2:0",
                     "--debug-corrupt 2:0: RANK must be in 0..1 (a rank of 2)"},
        BadValueCase{"allreduce --backend local --sizes 4K:8K --debug-corrupt 1:1024",
                     "--debug-corrupt 1:1024: INDEX must be in 0..1023 (the receive buffer of the 4K row"},
        BadValueCase{"allgather --backend local --ranks 4 --sizes 4K --debug-corrupt 0:1024",
                     "--debug-corrupt 0:1024: INDEX must be in 0..1023"},
        BadValueCase{"reduce --backend local --sizes 4K --root 1 --debug-corrupt 0:3",
                     "--debug-corrupt 0:3: RANK must be the root (1)"},
        BadValueCase{"allreduce --backend local --sizes 4K --debug-corrupt 0:-1",
                     "--debug-corrupt 0:-1: use RANK:INDEX"},
        BadValueCase{"allreduce --backend local --sizes 4K --debug-corrupt -1:0",
                     "--debug-corrupt -1:0: use RANK:INDEX"},
        // --expect, --backend, --transport, --format and --device name themselves.
        BadValueCase{"allreduce --backend local --sizes 4K --expect 'busbw>=1@0'",
                     "--expect busbw>=1@0: SIZE after '@': bad size '0'"},
        BadValueCase{"allreduce --backend local --sizes 4K --expect 'busbw>=1@8K'",
                     "--expect busbw>=1@8K: SIZE 8K is not one of --sizes 4K"},
        BadValueCase{"allreduce --backend local --sizes 4K --expect 'busbw>=x'", "--expect busbw>=x: GBPS must be"},
        BadValueCase{"allreduce --sizes 4K --backend tcp", "--backend tcp: unknown backend"},
        BadValueCase{"allreduce --sizes 4K --backend ''", "--backend '': unknown backend"},
        BadValueCase{"allreduce --backend ciuic --sizes 4K --transport bogus",
                     "--transport bogus: the runtime runs over mpi, local, nccl or gloo"},
        BadValueCase{"allreduce --backend local --sizes 4K --format \"$(printf 'x\\ny')\"",
                     "--format x?y: use table, csv or json"},
        BadValueCase{"allreduce --device tpu", "--device tpu: use cpu or cuda"},
        // An algorithm/codec pair the runtime refuses is refused before any rank starts.
        BadValueCase{kCiuic + "--algo native --codec int8",
                     "--algo native --codec int8: algorithm native does not take codec int8"},
        BadValueCase{kCiuic + "--algo powersgd --codec topk:0.1",
                     "--algo powersgd --codec topk:0.1: algorithm powersgd does not take codec topk:0.1"},
        // Nothing is printed about starting ranks before a refusal.
        BadValueCase{"broadcast --device cpu --sizes 4K --root 2", "--root 2: must be in 0..1 (a rank of 2)"},
        // An empty path is not "not given"; --out and --db never name one file.
        BadValueCase{"allreduce --backend local --sizes 4K --out ''", "--out '': an empty path"},
        BadValueCase{"allreduce --backend local --sizes 4K --db ''", "--db '': an empty path"},
        BadValueCase{"allreduce --backend local --sizes 4K --out /tmp/ciuic_cli_same --db /tmp/ciuic_cli_same",
                     "--out '/tmp/ciuic_cli_same' and --db '/tmp/ciuic_cli_same' name the same file"},
        BadValueCase{"compress --sizes 4K --out ''", "--out '': an empty path"},
        // compress and kernel: codec and rounding refusals name the option.
        BadValueCase{"compress --sizes 4K --codec topk:0", "--codec topk:0: codec 'topk:0': RATIO must be"},
        BadValueCase{"compress --sizes 4K --codec ''", "--codec '': unknown codec ''"},
        BadValueCase{"compress --sizes 4K --rounding up", "--rounding up: unknown rounding 'up'"},
        BadValueCase{"kernel ef-quantize --codec topk:0.1 --sizes 4K",
                     "--codec topk:0.1: kernel ef-quantize takes an element codec"},
        // --register: the runtime's shared windows, host memory of one host.
        BadValueCase{"allreduce --backend mpi --register yes",
                     "--register: applies to --backend ciuic (the bundled runtime) only"},
        BadValueCase{"allreduce --backend ciuic --register 1", "--register 1: yes or no"},
        BadValueCase{"allreduce --backend ciuic --algo rd --register yes",
                     "--register: the uncompressed ring reads and writes registered buffers; use --algo ring or "
                     "auto without --codec, --precision or --profile (this run: --algo rd --codec none --precision "
                     "fp32)"},
        BadValueCase{"allreduce --backend ciuic --algo native --precision bf16 --register yes",
                     "--register: the uncompressed ring reads and writes registered buffers; use --algo ring or "
                     "auto without --codec, --precision or --profile (this run: --algo native --codec none "
                     "--precision bf16)"},
        BadValueCase{"allreduce --backend ciuic --algo ring --codec int8 --register yes",
                     "--register: the uncompressed ring reads and writes registered buffers; use --algo ring or "
                     "auto without --codec, --precision or --profile (this run: --algo ring --codec int8 "
                     "--precision fp32)"}));

// Profiles: a bad field is named by its JSON path; a profile tuned for another topology is refused
// unless --profile-override says to apply it anyway.
class ProfileCli : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ciuic_cli_prof_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    Profile p;
    p.topology = "cpu_local";
    p.fingerprint = "0123456789abcdef";
    p.nodes = 1;
    p.ranks = 2;
    p.workload = "resnet50";
    p.mode = "model";
    p.strategy = "random";
    for (const auto& [lo, hi] : SizeBands()) {
      ProfileRule r;
      r.min_bytes = lo;
      r.max_bytes = hi;
      r.algo = "ring";
      r.codec = "none";
      r.streams = 2;
      r.bucket_bytes = 1 << 20;
      r.predicted_us = 10;
      p.rules.push_back(r);
    }
    good_ = nlohmann::json::parse(ProfileToJson(p));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const nlohmann::json& j, const std::string& name) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << j.dump(1);
    return path;
  }
  std::filesystem::path dir_;
  nlohmann::json good_;
};

TEST_F(ProfileCli, BadFieldsAreNamedByTheirJsonPath) {
  const std::string run = "allreduce --backend ciuic --transport local --ranks 2 --sizes 1K,1M --iters 2 --profile ";
  const Result ok = RunBenchCli(run + Write(good_, "good.json"));
  ASSERT_EQ(ok.code, 0) << ok.err;
  struct Case {
    const char* name;
    void (*edit)(nlohmann::json&);
    const char* message;
  };
  const Case cases[] = {
      {"neg", [](nlohmann::json& j) { j["rules"][2]["bucket_bytes"] = -5; },
       "profile.rules[2].bucket_bytes: -5 is not a positive size"},
      {"huge", [](nlohmann::json& j) { j["rules"][2]["bucket_bytes"] = 1e19; },
       "profile.rules[2].bucket_bytes: 1e+19 is above the largest allowed size, 1099511627776 (1T)"},
      {"float", [](nlohmann::json& j) { j["rules"][0]["streams"] = 2.5; },
       "profile.rules[0].streams: 2.5 is not a whole number"},
      {"overlap", [](nlohmann::json& j) { j["rules"][1]["max_bytes"] = 2 << 20; },
       "profile.rules[2]: band [1048576, 16777216) overlaps profile.rules[1]'s [65536, 2097152)"},
      {"missing", [](nlohmann::json& j) { j["rules"][3].erase("algo"); },
       "profile.rules[3].algo: required but missing"},
      {"type", [](nlohmann::json& j) { j["topology"]["ranks"] = "2"; },
       "profile.topology.ranks: \"2\" is a string, not a whole number"},
  };
  for (const auto& c : cases) {
    nlohmann::json j = good_;
    c.edit(j);
    const std::string path = Write(j, std::string(c.name) + ".json");
    const Result r = RunBenchCli(run + path);
    EXPECT_EQ(r.code, 1) << c.name << "\n" << r.err;
    EXPECT_EQ(r.err, "ciuic-bench: " + path + ": " + c.message + "\n") << c.name;
  }
}

TEST_F(ProfileCli, AProfileOfAnotherTopologyNeedsTheOverride) {
  nlohmann::json h100 = good_;  // dgx_h100's profile: 8 GPUs
  h100["topology"]["name"] = "dgx_h100";
  h100["topology"]["ranks"] = 8;
  const std::string path = Write(h100, "h100.json");
  const std::string run =
      "allreduce --backend ciuic --transport local --ranks 2 --sizes 1K --iters 2 --profile " + path;
  const Result r = RunBenchCli(run);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err, "ciuic-bench: --profile " + path +
                       ": tuned for dgx_h100 (8 rank(s) on 1 node(s)), this run has 2 rank(s); --profile-override "
                       "applies it anyway\n");
  h100["topology"]["ranks"] = 2;  // the rank count matches, the device does not
  h100["topology"]["device"] = "gpu";
  Write(h100, "h100.json");
  const Result device = RunBenchCli(run);
  EXPECT_EQ(device.code, 1) << device.err;
  EXPECT_NE(device.err.find("tuned for dgx_h100 (GPUs), this run is on cpu"), std::string::npos) << device.err;
  h100["topology"].erase("device");  // a profile from before the key: any topology but cpu_local is GPUs
  Write(h100, "h100.json");
  EXPECT_NE(RunBenchCli(run).err.find("tuned for dgx_h100 (GPUs), this run is on cpu"), std::string::npos);
  h100["topology"]["name"] = "cluster_lab";  // CPU ranks of several hosts: applies to a CPU run
  h100["topology"]["device"] = "cpu";
  Write(h100, "h100.json");
  const Result cpu = RunBenchCli(run);
  EXPECT_EQ(cpu.code, 0) << cpu.err;
  const Result forced = RunBenchCli(run + " --profile-override");
  EXPECT_EQ(forced.code, 0) << forced.err;
  EXPECT_NE(forced.out.find("# Out of bounds values : 0 OK"), std::string::npos) << forced.out;
}

// A rule for the library's own allreduce ("nccl") runs in its buckets like every other rule: a 1 MiB
// message under a 64 KiB bucket is 16 native allreduces, under a 16 MiB bucket one. A baseline_us
// carried by the profile is read and written back.
TEST_F(ProfileCli, ALibraryRuleRunsInItsBuckets) {
  for (const uint64_t bucket : {uint64_t{64} << 10, uint64_t{16} << 20}) {
    nlohmann::json j = good_;
    for (auto& rule : j["rules"]) {
      rule["algo"] = "nccl";
      rule["streams"] = 1;
      rule["bucket_bytes"] = bucket;
      rule["baseline_us"] = 12.5;
    }
    const std::string path = Write(j, "nccl.json");
    EXPECT_EQ(ParseProfile(Slurp(path), path).rules[0].baseline_us, 12.5);
    const std::string trace = (dir_ / "t.json").string();
    const Result r = RunBenchCli(
        "allreduce --backend ciuic --transport local --ranks 2 --sizes 1M --iters 2 -w 1 "
        "--profile " +
        path + " --trace " + trace);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
    const auto t = nlohmann::json::parse(Slurp(trace));
    int calls = 0, native = 0;
    for (const auto& e : t["traceEvents"]) {
      if (e["pid"] != 0 || !e.contains("args") || !e["args"].contains("bytes")) continue;
      if (e["name"] == "ciuic allreduce" && e["args"]["bytes"] == 1 << 20) ++calls;
      if (e["name"] == "native allreduce") {
        ++native;
        EXPECT_EQ(e["args"]["bytes"].get<uint64_t>(), std::min<uint64_t>(bucket, 1 << 20));
      }
    }
    ASSERT_GT(calls, 0) << bucket;
    EXPECT_EQ(native, calls * static_cast<int>((1 << 20) / std::min<uint64_t>(bucket, 1 << 20))) << bucket;
  }
}

TEST(Cli, CompressJsonCarriesEveryFieldAndSaneNumbers) {
  const auto dir = std::filesystem::temp_directory_path() / ("ciuic_cmp_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string json = (dir / "c.json").string();
  const Result r =
      RunBenchCli("compress --device cpu --codec int8 --sizes 64K,1M --iters 3 --format json --out " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(Slurp(json));
  EXPECT_EQ(j["schema"], "ciuic.compress/1");
  EXPECT_EQ(j["context"]["codec"], "int8");
  ASSERT_EQ(j["results"].size(), 4u);  // 2 sizes × normal, heavy
  for (const auto& row : j["results"]) {
    for (const char* k : {"size", "data", "codec", "ratio", "copy_gbps", "enc_us", "enc_gbps", "enc_pct_copy", "dec_us",
                          "dec_gbps", "acc_us", "acc_gbps", "rel_l2_error", "max_abs_error"})
      EXPECT_TRUE(row.contains(k)) << k;
    EXPECT_NEAR(row["ratio"].get<double>(), 4.0 * 256 / (256 + 4), 0.01);
    EXPECT_GT(row["rel_l2_error"].get<double>(), 0.0);
    EXPECT_LT(row["rel_l2_error"].get<double>(), 0.05);
    EXPECT_GT(row["enc_gbps"].get<double>(), 0.0);
  }
  const Result k = RunBenchCli("kernel all --device cpu --codec fp8e4m3 --sizes 256K --iters 2 --format csv");
  ASSERT_EQ(k.code, 0) << k.err;
  for (const char* name : {"ef-quantize", "decode-accumulate", "decode-add-encode", "flatten", "unflatten", "unscale"})
    EXPECT_NE(k.out.find(name), std::string::npos) << name << "\n" << k.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, CompressOnCudaWithoutGpuIsRuntimeError) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  const Result r = RunBenchCli("compress --device cuda --sizes 1M");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
}

TEST(Cli, NcclWithoutGpuIsRuntimeError) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  const Result r = RunBenchCli("allreduce --backend nccl --device cuda --sizes 1K");
  EXPECT_TRUE(r.code == 2 || r.code == 1) << r.err;
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
}

TEST(Cli, LocalTransportOnCudaWithoutGpuIsRuntimeError) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  const Result r = RunBenchCli("allreduce --backend ciuic --transport local --device cuda --ranks 4 --sizes 1K");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("no CUDA device"), std::string::npos) << r.err;
}

TEST(Cli, AverageIsValidatedAndNamedInTheHeader) {
  const Result bad = RunBenchCli("allreduce --backend local --ranks 2 --sizes 1K --average mean");
  EXPECT_EQ(bad.code, 1) << bad.err;
  EXPECT_EQ(CountLines(bad.err), 1) << bad.err;
  const Result mpi_cuda = RunBenchCli("allreduce --backend mpi --device cuda --sizes 1K");
  EXPECT_EQ(mpi_cuda.code, 1) << mpi_cuda.err;
  const Result ok = RunBenchCli("allreduce --backend local --ranks 2 --sizes 1K --average avg --iters 3");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("average avg (average over ranks of each rank's mean)"), std::string::npos) << ok.out;
}

TEST(Cli, ListNamesTheBuild) {
  const Result r = RunBenchCli("list");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("collectives: allreduce allgather reducescatter broadcast reduce alltoall sendrecv"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("fp8e4m3"), std::string::npos);
}

TEST(Cli, LocalRunWritesJsonAndDatabase) {
  const auto dir = std::filesystem::temp_directory_path() / ("ciuic_cli_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string json = (dir / "run.json").string(), db = (dir / "runs.db").string();
  const Result r = RunBenchCli("allgather --backend local --ranks 3 --sizes 3K:96K --format json --out " + json +
                               " --db " + db + " --iters 3");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(Slurp(json));
  EXPECT_EQ(j["schema"], "ciuic.bench/1");
  EXPECT_EQ(j["context"]["world_size"], 3);
  EXPECT_EQ(j["results"].size(), 12u);
  for (const auto& row : j["results"]) {
    EXPECT_EQ(row["wrong"], 0);
    EXPECT_NEAR(row["busbw_gbps"].get<double>(), row["algbw_gbps"].get<double>() * 2.0 / 3.0,
                1e-9 * row["algbw_gbps"].get<double>());
  }
  // A second run appends to the same database.
  ASSERT_EQ(RunBenchCli("allreduce --backend local --sizes 1K --db " + db + " --iters 2").code, 0);
  const Result q = RunBenchCli("list");  // the database is not locked afterwards
  EXPECT_EQ(q.code, 0);
  std::filesystem::remove_all(dir);
}

TEST(Cli, PlantedFaultExitsThree) {
  const Result r = RunBenchCli("allreduce --backend local --ranks 2 --sizes 4K --debug-corrupt 1:9 --iters 2");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("verification failed: 2 wrong element(s)"), std::string::npos) << r.err;
}

// A size that is not whole elements (or whole elements per rank, for allgather) runs as the bytes
// below it, as in nccl-tests; one line says so, and a whole size says nothing.
TEST(Cli, SizesThatAreNotWholeElementsAreNamedOnce) {
  const Result r = RunBenchCli("allreduce --backend local --ranks 2 --sizes 1001,1K,7 --iters 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("note: 2 size(s) are not a whole number of fp32 elements and run as fewer bytes (the size "
                       "column shows what ran): 1001 B as 1000 B, 7 B as 4 B\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_NE(r.out.find("\n        1000           250     float"), std::string::npos) << r.out;
  const Result split = RunBenchCli("allgather --backend local --ranks 3 --sizes 1K,3K --iters 2");
  ASSERT_EQ(split.code, 0) << split.err;
  EXPECT_NE(split.err.find("note: 1 size(s) are not a whole number of fp32 elements per rank of 3 and run as fewer "
                           "bytes (the size column shows what ran): 1024 B as 1020 B\n"),
            std::string::npos)
      << split.err;
  const Result whole = RunBenchCli("allreduce --backend local --ranks 2 --sizes 1K,4K --iters 2");
  ASSERT_EQ(whole.code, 0) << whole.err;
  EXPECT_EQ(whole.err, "") << whole.err;
}

// --dry-run makes every check a run makes before its ranks start and starts nothing: one line on
// stdout, no output file or database made; a size that cannot fit is refused as the run would.
TEST(Cli, DryRunChecksEverythingAndStartsNothing) {
  const auto dir = std::filesystem::temp_directory_path() / ("ciuic_dry_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string json = (dir / "run.json").string(), db = (dir / "runs.db").string();
  const Result ok = RunBenchCli("allgather --backend local --ranks 3 --sizes 1K:64K --dry-run --format json --out " +
                                json + " --db " + db);
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out,
            "# dry run: allgather fp32, 7 size(s) from 1K to 64K, out-of-place and in-place, 3 rank(s) (threads of "
            "this process), backend local on cpu: the checks made before ranks start passed (options, world, sizes "
            "against memory, outputs); nothing was run\n");
  EXPECT_EQ(ok.err, "") << ok.err;
  EXPECT_FALSE(std::filesystem::exists(json));
  EXPECT_FALSE(std::filesystem::exists(db));
  const Result big = RunBenchCli("allreduce --backend local --ranks 2 --sizes 1T --dry-run");
  EXPECT_EQ(big.code, 1) << big.err;
  EXPECT_EQ(CountLines(big.err), 1) << big.err;
  EXPECT_NE(big.err.find("--sizes 1T: size 1T does not fit"), std::string::npos) << big.err;
  const Result root = RunBenchCli("broadcast --backend local --ranks 2 --sizes 4K --root 2 --dry-run");
  EXPECT_EQ(root.code, 1) << root.err;
  EXPECT_NE(root.err.find("--root 2: must be in 0..1"), std::string::npos) << root.err;
  std::filesystem::remove_all(dir);
}

TEST(Cli, MissedExpectationExitsThree) {
  const Result r = RunBenchCli("allreduce --backend local --sizes 4K --iters 2 --expect 'busbw>=100000'");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("expectation missed"), std::string::npos) << r.err;
  EXPECT_EQ(RunBenchCli("allreduce --backend local --sizes 4K --iters 2 --expect 'busbw>=0.000001@4K'").code, 0);
}

// The device node stays a device: the output is written into it, not renamed over it.
TEST(Cli, OutToDevNullKeepsTheDevice) {
  struct stat before, after;
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  for (const char* format : {"json", "csv", "table"}) {
    const Result r = RunBenchCli(std::string("allreduce --backend local --sizes 1K --iters 2 --format ") + format +
                                 " --out /dev/null");
    EXPECT_EQ(r.code, 0) << r.err;
    ASSERT_EQ(::stat("/dev/null", &after), 0);
    EXPECT_TRUE(S_ISCHR(after.st_mode)) << format;
    EXPECT_EQ(after.st_rdev, before.st_rdev) << format;
    EXPECT_EQ(after.st_ino, before.st_ino) << format;
  }
}

TEST(Cli, ForeignDatabaseIsRefusedAndKept) {
  const auto path = std::filesystem::temp_directory_path() / ("ciuic_foreign_" + std::to_string(getpid()) + ".db");
  {
    std::ofstream f(path);
    f << "precious user data\n";
  }
  const Result r = RunBenchCli("allreduce --backend local --sizes 1K --db " + path.string());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_EQ(Slurp(path.string()), "precious user data\n");
  std::filesystem::remove(path);
}

// --trace: one file, a track per rank, the phases of the backend, a summary line per rank on stderr.
void CheckTraceRun(const std::string& args, int ranks, const std::set<std::string>& expected,
                   const std::set<std::string>& absent = {}) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ciuic_cli_trace_" + std::to_string(getpid()) + ".json")).string();
  std::filesystem::remove(path);
  const Result r = RunBenchCli(args + " --trace " + path);
  ASSERT_EQ(r.code, 0) << args << "\n" << r.err;  // 0: every row verified
  EXPECT_NE(r.err.find("ciuic-bench: wrote trace " + path), std::string::npos) << r.err;
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_NE(r.err.find("ciuic-bench: trace rank " + std::to_string(rank) + ": "), std::string::npos) << r.err;
  const auto t = nlohmann::json::parse(Slurp(path));
  ASSERT_EQ(testing_trace::CheckTraceEvents(t), "") << args;
  EXPECT_EQ(t["otherData"]["schema"], "ciuic.trace/1");
  EXPECT_EQ(t["otherData"]["world_size"], ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    const auto names = testing_trace::SpanNames(t, rank);
    for (const auto& n : expected) EXPECT_TRUE(names.count(n)) << args << ": rank " << rank << " has no " << n;
    for (const auto& n : absent) EXPECT_FALSE(names.count(n)) << args << ": rank " << rank << " has a " << n;
  }
  const auto shares = trace::Summarize(t, "timed");
  ASSERT_EQ(shares.size(), static_cast<size_t>(ranks));
  for (const auto& s : shares) {
    EXPECT_GT(s.host_us, 0);
    EXPECT_NEAR(s.compute_us + s.comm_us + s.wait_us + s.other_us, s.host_us, 1e-6 * s.host_us + 1e-3);
  }
  std::filesystem::remove(path);
}

// --register yes: the buffers lie in shared windows and the runtime's ring reads and writes the
// peers' buffers there (its "mapped ring" span), verified on every row; the header says so.
TEST(Cli, RegisteredBuffersRunTheRingOverSharedWindows) {
  CheckTraceRun(
      "allreduce --backend ciuic --transport local --ranks 3 --algo ring --register yes --sizes 4K,1M --iters 3 "
      "--warmup 1",
      3, {"ciuic allreduce", "mapped ring"});
  const Result r = RunBenchCli(
      "allreduce --backend ciuic --transport local --ranks 2 --register yes --algo ring --sizes 1K:64K --iters 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("codec none  buffers registered\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
}

// --algo auto --register yes: auto chooses by its table, and where the table names the ring the ring
// runs over the windows. A planted table decides (ring from 64 KiB, or native everywhere); a table
// measured on registered buffers says so in the crossover table and in the file it writes, and a
// run whose buffers differ from the file's is told.
TEST(Cli, AutoRunsTheRingOverRegisteredBuffersWhereItsTableNamesTheRing) {
  const auto dir = std::filesystem::temp_directory_path() / ("ciuic_cli_autoreg_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string ring = (dir / "ring.json").string(), native = (dir / "native.json").string();
  const std::string head = R"({"format":"ciuic-crossover","version":1,"ranks":2,"transport":"local","bands":[)";
  std::ofstream(ring) << head << R"({"below_bytes":65536,"algo":"native"},{"below_bytes":null,"algo":"ring"}]})";
  std::ofstream(native) << head << R"({"below_bytes":null,"algo":"native"}]})";
  const std::string run =
      "allreduce --backend ciuic --transport local --ranks 2 --register yes --sizes 4K,1M "
      "--iters 3 --warmup 1 --crossover ";
  CheckTraceRun(run + ring, 2, {"ciuic allreduce", "native", "mapped ring"});
  CheckTraceRun(run + native, 2, {"ciuic allreduce", "native"}, {"ring", "mapped ring"});
  const Result told = RunBenchCli(run + ring);
  ASSERT_EQ(told.code, 0) << told.err;
  EXPECT_NE(told.err.find("was measured on unregistered buffers; this run's are registered"), std::string::npos)
      << told.err;
  EXPECT_NE(told.out.find("buffers registered\n"), std::string::npos) << told.out;

  const std::string out = (dir / "measured.json").string();
  const Result table = RunBenchCli(
      "allreduce --backend ciuic --transport local --ranks 2 --register yes --sizes 4K,1M --crossover measure "
      "--crossover-rounds 1 --crossover-slot-ms 1 --crossover-table --crossover-out " +
      out);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("in place; buffers registered (the ring over shared windows)\n"), std::string::npos)
      << table.out;
  EXPECT_NE(table.err.find("measured on 2 ranks over local on registered buffers in "), std::string::npos) << table.err;
  EXPECT_NE(Slurp(out).find(R"("buffers": "registered")"), std::string::npos) << Slurp(out);
  const Result plain =
      RunBenchCli("allreduce --backend ciuic --transport local --ranks 2 --sizes 4K --iters 2 --crossover " + out);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_NE(plain.err.find("was measured on registered buffers; this run's are unregistered"), std::string::npos)
      << plain.err;
  // The file says how many hosts the measured ranks ran on; a run on another count is told.
  EXPECT_NE(Slurp(out).find(R"("hosts": 1)"), std::string::npos) << Slurp(out);
  EXPECT_EQ(plain.err.find(" host"), std::string::npos) << plain.err;
  const std::string two = (dir / "two_hosts.json").string();
  std::ofstream(two) << R"({"format":"ciuic-crossover","version":1,"ranks":2,"transport":"local","hosts":2,)"
                     << R"("bands":[{"below_bytes":null,"algo":"native"}]})";
  const Result across =
      RunBenchCli("allreduce --backend ciuic --transport local --ranks 2 --sizes 4K --iters 2 --crossover " + two);
  ASSERT_EQ(across.code, 0) << across.err;
  EXPECT_NE(across.err.find("was measured on 2 hosts; this run's ranks are on 1 (on one host the ring stages"),
            std::string::npos)
      << across.err;
  std::filesystem::remove_all(dir);
}

// --crossover measure and --crossover-table with --register yes time the candidates on registered
// buffers: the ring's calls there run over the window (its "mapped ring" span), without it they do not.
TEST(Cli, ARegisteredCrossoverMeasuresTheRingOverTheWindow) {
  for (bool registered : {false, true}) {
    for (bool table : {false, true}) {
      const auto events = testing_trace::TracedRanks(2, [&](Communicator& comm) {
        CrossoverCli c;
        c.source = "measure";
        c.rounds = 1;
        c.slot_s = 0.0005;
        c.registered = registered;
        std::ostringstream out;
        if (table) {
          RunCrossoverTable(comm, std::make_shared<const Crossover>(BuiltinCrossover("local")), {4096, 65536}, c, out);
        } else {
          ResolveCrossover(comm, c);
        }
      });
      for (int r = 0; r < 2; ++r)
        EXPECT_EQ(testing_trace::HasSpan(events[r], "mapped ring"), registered)
            << (table ? "--crossover-table" : "--crossover measure") << ", registered " << registered << ", rank " << r;
    }
  }
}

// --crossover-table prints one table per placement --inplace asks for, in place first; out of place
// every candidate is handed a source apart from its result (rd, which works in place, then copies
// the source first: its "copy" span), registered too (both lie in the window: the "mapped ring").
// Unregistered, the runtime --backend ciuic calls is timed too (its "ciuic allreduce" span, its columns).
TEST(Cli, TheCrossoverTableHasATablePerPlacement) {
  for (const auto& placement : {std::pair{true, false}, {false, true}, {true, true}}) {
    // Plain locals: the ranks' lambda captures them (clang 14 refuses a structured binding there).
    const bool in_place = placement.first, out_of_place = placement.second;
    for (bool registered : {false, true}) {
      std::string printed;
      const auto events = testing_trace::TracedRanks(2, [&](Communicator& comm) {
        CrossoverCli c;
        c.rounds = 1;
        c.slot_s = 0.0005;
        c.registered = registered;
        c.in_place = in_place;
        c.out_of_place = out_of_place;
        std::ostringstream out;
        const auto table = std::make_shared<const Crossover>(BuiltinCrossover("local"));
        RuntimeCommConfig rc;
        rc.algo.crossover = table;
        const std::unique_ptr<Communicator> runtime = MakeRuntimeCommunicatorOver(comm, rc);
        RunCrossoverTable(comm, table, {4096, 65536}, c, out, runtime.get());
        if (comm.Rank() == 0) printed = out.str();
      });
      const std::string what =
          fmt::format("in place {}, out of place {}, registered {}", in_place, out_of_place, registered);
      const size_t in_at = printed.find("us), in place"), out_at = printed.find("us), out of place");
      EXPECT_EQ(in_at != std::string::npos, in_place) << what << "\n" << printed;
      EXPECT_EQ(out_at != std::string::npos, out_of_place) << what << "\n" << printed;
      if (in_place && out_of_place) {
        EXPECT_LT(in_at, out_at) << what;
      }
      // Two sizes per table, each a row.
      size_t rows = 0;
      for (size_t at = printed.find("\n        4096 "); at != std::string::npos;
           at = printed.find("\n        4096 ", at + 1))
        ++rows;
      EXPECT_EQ(rows, static_cast<size_t>(in_place) + static_cast<size_t>(out_of_place)) << what << "\n" << printed;
      EXPECT_EQ(printed.find(" rt/lib") != std::string::npos, !registered) << what << "\n" << printed;
      for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(testing_trace::HasSpan(events[r], "copy"), out_of_place) << what << ", rank " << r;
        EXPECT_EQ(testing_trace::HasSpan(events[r], "mapped ring"), registered) << what << ", rank " << r;
        EXPECT_EQ(testing_trace::HasSpan(events[r], "ciuic allreduce"), !registered) << what << ", rank " << r;
      }
    }
  }
}

TEST(Cli, TraceOfTheLibraryAndOfTheRuntime) {
  CheckTraceRun("allreduce --backend local --ranks 2 --sizes 4K,64K --iters 3 --warmup 1", 2,
                {"row", "warmup", "timed", "check", "barrier", "allreduce"});
  CheckTraceRun(
      "allreduce --backend ciuic --transport local --ranks 3 --codec int8 --sizes 64K --iters 3 --warmup 1 "
      "--bucket 16K",
      3,
      {"timed", "allreduce", "ciuic allreduce", "bucket", "ring", "encode", "decode-add-encode", "decode", "send",
       "recv", "reduce-scatter", "allgather"});
}

#if CIUIC_TEST_HAVE_MPI
TEST(CliMpi, TraceGathersEveryProcess) {
  CheckTraceRun("allreduce --backend mpi --ranks 2 --sizes 4K --iters 3 --warmup 1", 2, {"timed", "allreduce"});
  // Each process maps the other's window (/proc/PID/fd): the ring reads and writes across processes.
  CheckTraceRun(
      "allreduce --backend ciuic --transport mpi --ranks 2 --algo ring --register yes --sizes 4K,1M --iters 3 "
      "--warmup 1",
      2, {"ciuic allreduce", "mapped ring"});
  CheckTraceRun(
      "allreduce --backend ciuic --transport mpi --ranks 2 --codec topk:0.01 --sizes 64K --iters 3 "
      "--warmup 1",
      2, {"ciuic allreduce", "sparse", "encode", "decode", "send", "recv"});
}

// Ranks a launcher started with different --register: auto's measurement makes its windows on every
// rank (collective), so the ranks first agree; rank 0 names the difference in one line and every rank
// ends with exit 1 (no rank waits in a window another never makes).
TEST(CliMpi, RanksThatDisagreeOnRegisterEndTogetherInOneLine) {
  const std::string run = std::string(CIUIC_BENCH_EXE) +
                          " allreduce --backend ciuic --sizes 4K --crossover measure --crossover-table "
                          "--crossover-rounds 1 --timeout 60 --register ";
  const Result r = RunCommand(
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpiexec --quiet "
      "--oversubscribe -n 1 " +
      run + "yes : -n 1 " + run + "no");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("ciuic-bench: the ranks disagree on --register: rank 0 has yes, rank 1 has no; launch "
                        "every rank with the same options\n",
                        0),
            0u)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliMpi, RelaunchesUnderMpiexecAndVerifies) {
  const Result r = RunBenchCli("allreduce --sizes 1K:4M --ranks 2 --format csv");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("starting 2 ranks"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("allreduce,mpi,cpu,2,fp32"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("--bind-to none"), std::string::npos) << "MPI ranks keep Open MPI's binding\n" << r.err;
  // Gloo's I/O thread needs a core beside its caller: its ranks are started unbound (and the ciuic runtime's
  // over gloo too), whatever Open MPI would bind.
  for (const char* args : {"allreduce --backend gloo --sizes 1K --ranks 2 --iters 2 --format csv",
                           "allreduce --backend ciuic --transport gloo --sizes 1K --ranks 2 --iters 2 --format csv"}) {
    const Result g = RunBenchCli(args);
    ASSERT_EQ(g.code, 0) << args << "\n" << g.err;
    EXPECT_NE(g.err.find("--bind-to none"), std::string::npos) << args << "\n" << g.err;
  }
}

TEST(CliMpi, ThreeRanksEveryCollective) {
  for (const char* op : {"allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv"}) {
    const Result r = RunBenchCli(std::string(op) + " --sizes 1K:1M:x8 --ranks 3 --dtype bf16 --iters 3");
    EXPECT_EQ(r.code, 0) << op << "\n" << r.err << r.out;
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << op << "\n" << r.out;
  }
}

// --backend gloo over mpiexec: every collective verified exactly at small sizes (fp32 and a dtype
// gloo reduces in 16 bits), each allreduce algorithm named in the output, the runtime over gloo's
// pairs, gloo's FileStore, a planted fault counted, bf16 reductions skipped with the reason.
#if CIUIC_TEST_HAVE_GLOO
TEST(CliMpiGloo, EveryCollectiveVerifies) {
  for (const CollSpec* spec : AllCollectives()) {
    const std::string args = fmt::format(
        "{} --backend gloo --ranks 2 --sizes 1K:256K:x16 --iters 3 --warmup 1 "
        "--dtype fp32,fp16{}",
        spec->name, spec->reduces ? " --op sum,max,avg" : "");
    const Result r = RunBenchCli(args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.err << r.out;
    EXPECT_NE(r.out.find("backend gloo"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("gloo Gloo 0.5.0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.err.find("failed"), std::string::npos) << args << "\n" << r.err;
    // Only what gloo does not offer is skipped: in-place alltoall and sendrecv.
    const bool skips = spec->kind == Collective::kAllToAll || spec->kind == Collective::kSendRecv;
    EXPECT_EQ(r.out.find("not supported by the gloo backend") != std::string::npos, skips) << args << "\n" << r.out;
  }
  const Result three = RunBenchCli(
      "reducescatter --backend gloo --ranks 3 --sizes 96:96K:x32 --iters 2 --dtype int32,fp64 --op prod,min");
  EXPECT_EQ(three.code, 0) << three.err << three.out;
  EXPECT_NE(three.out.find("# Out of bounds values : 0 OK"), std::string::npos) << three.out;
}

TEST(CliMpiGloo, EachAllReduceAlgorithmByName) {
  for (const char* algo : {"ring", "ring-chunked", "halving-doubling", "bcube"}) {
    const Result r =
        RunBenchCli(fmt::format("allreduce --backend gloo --ranks 2 --algo {} --sizes 1K:4M:x16 --iters 3 "
                                "--warmup 1 --format json",
                                algo));
    ASSERT_EQ(r.code, 0) << algo << "\n" << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["context"]["algo"], algo);
    EXPECT_EQ(j["context"]["backend"], "gloo");
    EXPECT_EQ(j["context"]["library_versions"]["gloo"], "Gloo 0.5.0");
    ASSERT_EQ(j["results"].size(), 8u);
    for (const auto& row : j["results"]) EXPECT_EQ(row["wrong"], 0) << algo;
  }
  const Result dflt = RunBenchCli("allreduce --backend gloo --ranks 3 --sizes 4K --iters 2 --warmup 1");
  EXPECT_EQ(dflt.code, 0) << dflt.err;
  EXPECT_NE(dflt.out.find("algo ring"), std::string::npos) << dflt.out;  // what gloo::allreduce picks
}

TEST(CliMpiGloo, RuntimeOverGlooAndFileStore) {
  for (const char* algo : {"ring", "hier --ranks-per-node 1", "rd"}) {
    const Result r =
        RunBenchCli(fmt::format("allreduce --backend ciuic --transport gloo --algo {} --ranks 2 "
                                "--sizes 4K:1M:x16 --iters 3 --warmup 1",
                                algo));
    EXPECT_EQ(r.code, 0) << algo << "\n" << r.err << r.out;
    EXPECT_NE(r.out.find("transport gloo"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << algo << "\n" << r.out;
  }
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("ciuic-gloo-cli-{}", getpid());
  std::filesystem::create_directories(dir);
  const Result f =
      RunBenchCli(fmt::format("allgather --backend gloo --ranks 2 --sizes 4K --iters 2 --gloo-store {}", dir.string()));
  EXPECT_EQ(f.code, 0) << f.err;
  EXPECT_NE(f.out.find("gloo-store file"), std::string::npos) << f.out;
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

TEST(CliMpiGloo, PlantedFaultAndUnsupportedRows) {
  const Result r = RunBenchCli("allreduce --backend gloo --ranks 2 --sizes 64K --iters 2 --debug-corrupt 1:5");
  EXPECT_EQ(r.code, 3) << r.err << r.out;
  EXPECT_NE(r.out.find("# Out of bounds values : 2 FAILED"), std::string::npos) << r.out;
  const Result bf16 = RunBenchCli("allreduce --backend gloo --ranks 2 --sizes 4K --iters 2 --dtype bf16");
  EXPECT_EQ(bf16.code, 0) << bf16.err << bf16.out;  // both: once under ASan it ended 1 with only the launch line
  EXPECT_NE(bf16.out.find("not supported by the gloo backend"), std::string::npos) << bf16.out;
}
#endif

TEST(CliMpi, PlantedFaultAcrossProcessesExitsThree) {
  const Result r = RunBenchCli("allreduce --sizes 64K --ranks 2 --debug-corrupt 1:5 --iters 2 --dtype fp16");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.out.find("# Out of bounds values : 2 FAILED"), std::string::npos) << r.out;
}
#endif

}  // namespace
}  // namespace ciuic
