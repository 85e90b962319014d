// Outputs land where the user pointed without replacing what is there (a device, a FIFO, a symlink,
// the shell's stdout), output locations are refused before a run, and names from files are checked
// before they become file names.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/files.h"
#include "tests/test_seed.h"

namespace ciuic {
namespace {

class FilesTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ciuic_files_" + std::to_string(::getpid()) + "_" +
                                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add);
    std::filesystem::remove_all(dir_);
  }
  std::string Path(const char* name) const { return (dir_ / name).string(); }
  static std::string Slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  // Fresh text each call; the test's calls in turn follow from the process's seed (CIUIC_TEST_SEED).
  std::string RandomText(size_t n) {
    std::string s(n, ' ');
    for (char& c : s) c = static_cast<char>('a' + rng_() % 26);
    return s;
  }
  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::filesystem::path dir_;
  std::mt19937 rng_{testing_seed::TestSeed()};
};

// A file written aside is put in place (the old one replaced, no temporary left); when it cannot be
// (the target is a non-empty folder), the error names what was written, the temporary is gone and the
// target is untouched.
// Stamps: seconds ("2026-11-22T17:48:19Z") for stored rows, milliseconds for rows stored together
// that a later store must not share ("2026-11-27T01:24:53.123Z").
TEST(IsoNow, SecondsOrMilliseconds) {
  EXPECT_TRUE(std::regex_match(IsoNow(), std::regex(R"(20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ)"))) << IsoNow();
  const std::string ms = IsoNow(/*milliseconds=*/true);
  EXPECT_TRUE(std::regex_match(ms, std::regex(R"(20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d\d\dZ)"))) << ms;
}

TEST_F(FilesTest, CommitFileDurablyReplacesOrLeavesTheOldAndNoTemporary) {
  const auto target = Path("state.bin"), tmp = Path("state.bin.tmp");
  std::ofstream(target) << "old";
  std::ofstream(tmp) << "new";
  CommitFileDurably(tmp, target, "state file 'state.bin'");
  EXPECT_EQ(Slurp(target), "new");
  EXPECT_EQ(Entries(), std::vector<std::string>{"state.bin"});
  const auto folder = Path("busy");
  std::filesystem::create_directories(folder + "/inside");
  std::ofstream(tmp) << "newer";
  try {
    CommitFileDurably(tmp, folder, "state file 'busy'");
    ADD_FAILURE() << "renaming over a non-empty folder succeeded";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write state file 'busy': "), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp));
  EXPECT_TRUE(std::filesystem::exists(folder + "/inside"));
  EXPECT_THROW(CommitFileDurably(Path("missing.tmp"), target, "x"), RuntimeError);
  EXPECT_EQ(Slurp(target), "new");
}

TEST_F(FilesTest, RegularFileIsReplacedWholeAndKeepsItsMode) {
  const auto p = Path("out.json");
  const std::string first = RandomText(5000), second = RandomText(300);
  WriteFileAtomically(p, first);
  EXPECT_EQ(Slurp(p), first);
  ASSERT_EQ(::chmod(p.c_str(), 0640), 0);
  WriteFileAtomically(p, second);
  EXPECT_EQ(Slurp(p), second);
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(Entries(), std::vector<std::string>{"out.json"});  // no temporary file left behind
}

TEST_F(FilesTest, DevNullStaysACharacterDevice) {
  struct stat before, after;
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  WriteFileAtomically("/dev/null", RandomText(10000));
  ASSERT_EQ(::stat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_rdev, before.st_rdev);
  EXPECT_EQ(after.st_ino, before.st_ino);
  for (const auto& e : std::filesystem::directory_iterator("/dev"))
    EXPECT_EQ(e.path().filename().string().rfind("null.tmp", 0), std::string::npos) << e.path();
}

TEST_F(FilesTest, DevFullReportsTheFailureAndStaysADevice) {
  struct stat st;
  if (::stat("/dev/full", &st) != 0) GTEST_SKIP() << "no /dev/full here";
  try {
    WriteFileAtomically("/dev/full", "x");
    FAIL() << "a write to /dev/full succeeded";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
  }
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(FilesTest, FifoIsWrittenInPlaceToItsReader) {
  const auto p = Path("pipe");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  const std::string text = RandomText(300000);  // more than a pipe buffer: the reader must drain it
  std::string got;
  std::thread reader([&] { got = Slurp(p); });
  WriteFileAtomically(p, text);
  reader.join();
  EXPECT_EQ(got.size(), text.size());
  EXPECT_TRUE(got == text);
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(Entries(), std::vector<std::string>{"pipe"});
}

TEST_F(FilesTest, DevStdoutAppendsToWhatTheShellRedirected) {
  const auto p = Path("stdout.txt");
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "table\n", 6), 6);
  std::fflush(stdout);
  const int saved = ::dup(1);
  ::dup2(fd, 1);
  WriteFileAtomically("/dev/stdout", "{\"json\": 1}\n");
  ::dup2(saved, 1);
  ::close(saved);
  ::close(fd);
  EXPECT_EQ(Slurp(p), "table\n{\"json\": 1}\n");  // neither truncated nor replaced
}

TEST_F(FilesTest, SymlinkKeepsItsLinkAndItsTargetIsReplaced) {
  const auto target = Path("real.json"), link = Path("link.json");
  WriteFileAtomically(target, "old");
  std::filesystem::create_symlink(target, link);
  WriteFileAtomically(link, "new");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(Slurp(target), "new");
}

TEST_F(FilesTest, WritableOutputsPassAndCreateNothing) {
  EXPECT_NO_THROW(CheckWritableOutput(Path("new.json"), "--out"));
  EXPECT_NO_THROW(CheckWritableOutput(Path("new.db"), "--db", true));
  EXPECT_NO_THROW(CheckWritableOutput("/dev/null", "--out"));
  const auto p = Path("pipe");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  EXPECT_NO_THROW(CheckWritableOutput(p, "--out"));  // checked without opening: no reader needed
  EXPECT_EQ(Entries(), std::vector<std::string>{"pipe"});
}

std::string Refusal(const std::string& path, bool regular_only = false) {
  try {
    CheckWritableOutput(path, "--out", regular_only);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST_F(FilesTest, UnwritableOutputsAreRefusedWithOneLine) {
  EXPECT_NE(Refusal("/proc/nonexistent/x.json").find("does not exist"), std::string::npos);
  EXPECT_NE(Refusal("/proc/ciuic_out.json").find("cannot create files in '/proc'"), std::string::npos)
      << Refusal("/proc/ciuic_out.json");
  EXPECT_NE(Refusal(dir_.string()).find("is a directory"), std::string::npos);
  WriteFileAtomically(Path("file"), "x");
  EXPECT_NE(Refusal(Path("file") + "/x").find("Not a directory"), std::string::npos) << Refusal(Path("file") + "/x");
  EXPECT_NE(Refusal("/dev/null", true).find("not a regular file"), std::string::npos);
  EXPECT_NE(Refusal("").find("empty path"), std::string::npos);
  for (const auto* p : {"/proc/nonexistent/x.json", "/proc/ciuic_out.json", "/dev/null"}) {
    const std::string why = Refusal(p, true);
    EXPECT_EQ(why.rfind("--out '", 0), 0u) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  }
}

// A folder the user cannot write to: a 0555 folder, or, as root (how CI runs; root writes into a 0555
// folder anyway), a tmpfs mounted read-only here and unmounted after.
TEST_F(FilesTest, AFolderThatCannotBeWrittenIsRefusedWithOneLine) {
  std::string folder = dir_.string();
  struct Unmount {
    std::string at;
    ~Unmount() {
      if (!at.empty()) std::system(("umount " + at).c_str());
    }
  } unmount;
  if (::geteuid() != 0) {
    ASSERT_EQ(::chmod(dir_.c_str(), 0555), 0);
  } else {
    folder = Path("ro");
    std::filesystem::create_directories(folder);
    if (std::system(("mount -t tmpfs -o ro,size=64k ciuic_ro " + folder + " 2>/dev/null").c_str()) != 0)
      GTEST_SKIP() << "root, and cannot mount a read-only tmpfs here";
    unmount.at = folder;
  }
  const std::string why = Refusal(folder + "/x.json");
  EXPECT_NE(why.find("cannot create files"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  EXPECT_FALSE(std::filesystem::exists(folder + "/x.json"));
}

// A full file system lets an empty file be created; the output check writes a byte so a run does not
// end in "No space left on device" after its work is done. A 64 KiB tmpfs made (and unmounted) here.
TEST_F(FilesTest, AFullFileSystemIsRefusedBeforeTheRun) {
  const std::string mnt = Path("tiny");
  std::filesystem::create_directories(mnt);
  if (::geteuid() != 0 || std::system(("mount -t tmpfs -o size=64k ciuic_tiny " + mnt + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  struct Unmount {
    std::string at;
    ~Unmount() { std::system(("umount " + at).c_str()); }
  } unmount{mnt};
  EXPECT_EQ(Refusal(mnt + "/out.json"), "");
  {
    std::ofstream fill(mnt + "/fill", std::ios::binary);
    const std::string block(4096, 'x');
    for (int i = 0; i < 64 && fill; ++i) fill << block;
  }
  const std::string why = Refusal(mnt + "/out.json");
  EXPECT_NE(why.find("No space left on device"), std::string::npos) << why;
  EXPECT_FALSE(std::filesystem::exists(mnt + "/out.json"));
}

// The default data folder follows $CIUIC_DATA_DIR, then $XDG_DATA_HOME/ciuic, then
// ~/.local/share/ciuic; never the current directory. It is made on first use only when asked to.
TEST_F(FilesTest, DataHomeFollowsTheEnvironmentNotTheCurrentDirectory) {
  struct Env {
    std::string name;
    std::string old;
    bool had;
    explicit Env(const char* n) : name(n), had(std::getenv(n) != nullptr) {
      if (had) old = std::getenv(n);
    }
    ~Env() { had ? setenv(name.c_str(), old.c_str(), 1) : unsetenv(name.c_str()); }
  } data("CIUIC_DATA_DIR"), xdg("XDG_DATA_HOME"), home("HOME");
  setenv("CIUIC_DATA_DIR", Path("chosen").c_str(), 1);
  EXPECT_EQ(DataHome(false), Path("chosen"));
  EXPECT_FALSE(std::filesystem::exists(Path("chosen")));  // not made unless asked
  EXPECT_EQ(DataHome(true), Path("chosen"));
  EXPECT_TRUE(std::filesystem::is_directory(Path("chosen")));
  unsetenv("CIUIC_DATA_DIR");
  setenv("XDG_DATA_HOME", Path("xdg").c_str(), 1);
  EXPECT_EQ(DataHome(false), Path("xdg") + "/ciuic");
  setenv("XDG_DATA_HOME", "relative/not/allowed", 1);  // the XDG spec: relative values are ignored
  setenv("HOME", Path("home").c_str(), 1);
  EXPECT_EQ(DataHome(false), Path("home") + "/.local/share/ciuic");
  unsetenv("XDG_DATA_HOME");
  unsetenv("HOME");
  EXPECT_THROW(DataHome(false), InputError);
  WriteFileAtomically(Path("file"), "x");
  setenv("CIUIC_DATA_DIR", Path("file").c_str(), 1);
  EXPECT_THROW(DataHome(true), InputError);
}

TEST(FileNameTest, NamesFromFilesAreSingleSafeComponents) {
  for (const std::string& bad :
       std::vector<std::string>{"../x", "../../x", "..", ".", ".hidden", "a/b", "/abs", "", "x\ny", "a b", "x\\y",
                                std::string(129, 'a'), std::string("nul\0l", 5)}) {
    try {
      CheckFileNameComponent(bad, "topology name");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("topology name '", 0), 0u) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  for (const std::string& good :
       std::vector<std::string>{"dgx_a100", "cpu_local", "my-topo.v2", "A", std::string(128, 'z')})
    EXPECT_NO_THROW(CheckFileNameComponent(good, "topology name")) << good;
}

}  // namespace
}  // namespace ciuic
