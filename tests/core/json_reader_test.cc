#include "core/json_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <random>
#include <string>

#include "core/error.h"
#include "tests/test_seed.h"

namespace ciuic {
namespace {

// The InputError's text, or "" when `f` did not throw one.
std::string ReaderRefusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string Nested(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

// The root object is one level: {"schema": <levels arrays>} is levels + 1 deep.
TEST(JsonReaderTest, NestingIsRefusedPastTheLimitWithThePathAndAcceptedUpToIt) {
  const JsonDocument at_limit("{\"schema\": " + Nested(kMaxJsonDepth - 1) + "}", "profile", "ok.json");
  EXPECT_EQ(at_limit.Root()["schema"].Elements().size(), 1u);
  for (const size_t levels : {kMaxJsonDepth, kMaxJsonDepth + 1, size_t{100000}, size_t{1000000}}) {
    SCOPED_TRACE(levels);
    const std::string why =
        ReaderRefusal([&] { JsonDocument("{\"schema\": " + Nested(levels) + "}", "profile", "deep.json"); });
    EXPECT_EQ(why, fmt::format("deep.json: profile.schema[0]...: nested more than {} levels deep", kMaxJsonDepth));
  }
  // Objects count as levels too, and the path names their keys.
  std::string objects;
  for (size_t i = 0; i <= kMaxJsonDepth; ++i) objects += "{\"k\": ";
  objects += '1';
  objects.append(kMaxJsonDepth + 1, '}');
  EXPECT_EQ(ReaderRefusal([&] { JsonDocument(objects, "workload", "o.json"); }),
            fmt::format("o.json: workload.k.k...: nested more than {} levels deep", kMaxJsonDepth));
}

TEST(JsonReaderTest, ARepeatedKeyIsRefusedNamingItsPath) {
  const struct {
    const char* text;
    const char* says;
  } cases[] = {
      {R"({"nodes": 0, "nodes": 1})", "t.json: topology.nodes: given twice"},
      {R"({"rules": [{"a": 1}, {"b": -5, "c": 2, "b": 5}]})", "t.json: topology.rules[1].b: given twice"},
      // Scalars, arrays and objects before it all count in the index.
      {R"({"r": [1, "x", [2, 3], {}, null, {"k": 1, "k": 1}]})", "t.json: topology.r[5].k: given twice"},
      {R"({"a b": {"x": {}, "x": []}})", R"(t.json: topology["a b"].x: given twice)"},
      {R"({"a": 1, "b": {"a": 2}, "a": 3})", "t.json: topology.a: given twice"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string why = ReaderRefusal([&] { JsonDocument(c.text, "topology", "t.json"); });
    EXPECT_EQ(why.rfind(c.says, 0), 0u) << why;
  }
  // The file's name is printed as one line.
  EXPECT_EQ(ReaderRefusal([] { JsonDocument(R"({"a": 1, "a": 2})", "topology", "dir\nx/t.json"); }),
            "dir?x/t.json: topology.a: given twice (a key may appear once per object)");
  // One key in several objects is no repetition, and paths of later values stay right.
  const JsonDocument ok(R"({"a": {"n": 1}, "b": [{"n": 2}, 7, {"n": 3}], "n": 4})", "topology", "t.json");
  const JsonValue root = ok.Root();
  EXPECT_EQ(root["a"]["n"].Integer(0, 9), 1);
  EXPECT_EQ(root["b"].Elements()[2]["n"].path(), "topology.b[2].n");
  EXPECT_EQ(root["n"].Integer(0, 9), 4);
}

// A double cannot hold INT64_MAX or UINT64_MAX: they round up to 2^63 and 2^64, one above the range.
// A literal too large for uint64_t is read as that double.
TEST(JsonReaderTest, IntegerRangesAreExactAtTheLimitsOf64Bits) {
  auto value = [](const std::string& text) {
    return std::make_shared<JsonDocument>("{\"v\": " + text + "}", "profile", "n.json");
  };
  auto unsigned_of = [&](const std::string& text) { return value(text)->Root()["v"].Unsigned(0, UINT64_MAX); };
  auto integer_of = [&](const std::string& text) { return value(text)->Root()["v"].Integer(INT64_MIN, INT64_MAX); };
  EXPECT_EQ(unsigned_of("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(unsigned_of("18000000000000000000.0"), 18000000000000000000ull);
  EXPECT_EQ(unsigned_of("0.0"), 0u);
  for (const char* text : {"18446744073709551616", "18446744073709551616.0", "1e20", "-1", "-1.0"}) {
    SCOPED_TRACE(text);
    EXPECT_NE(ReaderRefusal([&] { unsigned_of(text); }).find("n.json: profile.v: "), std::string::npos);
  }
  EXPECT_EQ(integer_of("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(integer_of("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(integer_of("-9223372036854775808.0"), INT64_MIN);
  EXPECT_EQ(integer_of("9223372036854774784.0"), 9223372036854774784);  // the largest double below 2^63
  for (const char* text :
       {"9223372036854775808", "9223372036854775808.0", "18446744073709551616", "-9223372036854777856.0", "1e19"}) {
    SCOPED_TRACE(text);
    EXPECT_NE(ReaderRefusal([&] { integer_of(text); }).find("n.json: profile.v: "), std::string::npos);
  }
  // Narrower ranges hold exactly too, whichever way the number is spelled.
  for (const char* text : {"5", "5.0", "5e0"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(value(text)->Root()["v"].Integer(5, 5), 5);
    EXPECT_EQ(value(text)->Root()["v"].Unsigned(5, 5), 5u);
    EXPECT_NE(ReaderRefusal([&] { value(text)->Root()["v"].Integer(6, 9); }).find("is not in 6..9"), std::string::npos);
    EXPECT_NE(ReaderRefusal([&] { value(text)->Root()["v"].Unsigned(0, 4); }).find("is not in 0..4"),
              std::string::npos);
  }
}

TEST(JsonReaderTest, SizesPastUint64AreRefusedNotClamped) {
  auto size_of = [](const std::string& text, uint64_t hi) {
    const JsonDocument d("{\"v\": " + text + "}", "profile", "s.json");
    return d.Root()["v"].Size(1, hi);
  };
  EXPECT_EQ(size_of("18000000000000000000.0", UINT64_MAX), 18000000000000000000ull);
  EXPECT_EQ(size_of("18446744073709551615", UINT64_MAX), UINT64_MAX);
  for (const char* text : {"18446744073709551616", "18446744073709551616.0", "1e300"}) {
    SCOPED_TRACE(text);
    EXPECT_NE(ReaderRefusal([&] { size_of(text, UINT64_MAX); }).find("is above the largest allowed size"),
              std::string::npos);
  }
  EXPECT_NE(ReaderRefusal([&] { size_of("4096.0", 4095); }).find("is above the largest allowed size"),
            std::string::npos);
}

class JsonReaderFileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ciuic_json_" + std::to_string(::getpid()) + "_" +
                                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const char* name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(JsonReaderFileTest, ReadsARegularFileWhole) {
  std::mt19937 rng(testing_seed::TestSeed());
  std::string bytes(200000 + rng() % 10000, '\0');  // several reads, NULs and all byte values
  for (char& c : bytes) c = static_cast<char>(rng());
  const std::string p = Path("a.json");
  std::ofstream(p, std::ios::binary) << bytes;
  EXPECT_TRUE(ReadTextFile(p, "profile") == bytes);
  std::filesystem::create_symlink(p, Path("link.json"));
  EXPECT_TRUE(ReadTextFile(Path("link.json"), "profile") == bytes);
}

// A FIFO nobody writes to used to block the reader forever in open(); it is refused at once. If the
// reader blocks anyway, opening the FIFO for writing here releases it and the test fails.
TEST_F(JsonReaderFileTest, AFifoIsRefusedWithoutWaiting) {
  const std::string p = Path("t.json");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  auto read = std::async(std::launch::async, [&] { return ReaderRefusal([&] { ReadTextFile(p, "topology"); }); });
  if (read.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int fd = ::open(p.c_str(), O_WRONLY);
    ::close(fd);
    FAIL() << "ReadTextFile blocked on a FIFO";
  }
  EXPECT_EQ(read.get(), fmt::format("cannot read topology '{}': a FIFO, not a regular file", p));
}

TEST_F(JsonReaderFileTest, OtherNonFilesAreRefusedNamingThePath) {
  EXPECT_EQ(ReaderRefusal([&] { ReadTextFile(dir_.string(), "profile"); }),
            fmt::format("cannot read profile '{}': a directory, not a regular file", dir_.string()));
  EXPECT_EQ(ReaderRefusal([&] { ReadTextFile("/dev/null", "workload"); }),
            "cannot read workload '/dev/null': a device, not a regular file");
  EXPECT_EQ(ReaderRefusal([&] { ReadTextFile(Path("missing.json"), "profile"); }),
            fmt::format("cannot read profile '{}': No such file or directory", Path("missing.json")));
  // A newline in the name stays one line of message.
  const std::string odd = Path("new\nline.json");
  EXPECT_EQ(ReaderRefusal([&] { ReadTextFile(odd, "profile"); }).find('\n'), std::string::npos);
}

}  // namespace
}  // namespace ciuic
