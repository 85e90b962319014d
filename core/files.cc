#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace ciuic {

namespace {

// The descriptor a path names by convention (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N),
// else -1. Opening such a path again would start a new file offset at 0 (and with O_TRUNC erase what
// the shell's redirection already holds), so these are written through the descriptor itself.
int DescriptorAlias(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (path.rfind(prefix, 0) != 0) continue;
    const std::string digits = path.substr(prefix.size());
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoi(digits);
  }
  return -1;
}

std::string Errno() { return std::strerror(errno); }

void WriteAll(int fd, const std::string& text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw RuntimeError(fmt::format("cannot write '{}': {}", path, n < 0 ? Errno() : "short write"));
    done += static_cast<size_t>(n);
  }
}

// A name beside `target` that no other thread or process of ours uses at the same time.
std::string TempNameFor(const std::string& target) {
  static std::atomic<unsigned> counter{0};
  return fmt::format("{}.tmp.{}.{}", target, getpid(), counter.fetch_add(1));
}

// A symlink to an existing file is followed, so the link stays and its target is replaced.
std::string ResolveLink(const std::string& path) {
  struct stat lst;
  if (::lstat(path.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return path;
  std::error_code ec;
  const auto real = std::filesystem::canonical(path, ec);
  return ec ? path : real.string();
}

std::string FolderOf(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

void WriteInPlace(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw RuntimeError(fmt::format("cannot write '{}': {}", path, Errno()));
  try {
    WriteAll(fd, text, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw RuntimeError(fmt::format("cannot write '{}': {}", path, Errno()));
}

// Renames `tmp` (written and fsync'd) over `target`, then fsyncs the folder: the rename is durable once
// the folder's entry is (a file system without directory fsync still has the file). False, errno
// set, when the rename failed.
bool RenameAndSyncFolder(const std::string& tmp, const std::string& target) {
  if (::rename(tmp.c_str(), target.c_str()) != 0) return false;
  const int dir = ::open(FolderOf(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
  return true;
}

void ReplaceAtomically(const std::string& target, const std::string& text, const struct stat* old) {
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    tmp = TempNameFor(target);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) throw RuntimeError(fmt::format("cannot write '{}': cannot create '{}': {}", target, tmp, Errno()));
  try {
    if (old) (void)::fchmod(fd, old->st_mode & 07777);  // a replaced file keeps its permissions
    WriteAll(fd, text, tmp);
    if (::fsync(fd) != 0) throw RuntimeError(fmt::format("cannot write '{}': fsync: {}", tmp, Errno()));
    if (::close(fd) != 0) {
      fd = -1;
      throw RuntimeError(fmt::format("cannot write '{}': {}", tmp, Errno()));
    }
    fd = -1;
    if (!RenameAndSyncFolder(tmp, target)) throw RuntimeError(fmt::format("cannot write '{}': {}", target, Errno()));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace

void CommitFileDurably(const std::string& tmp, const std::string& target, std::string_view what) {
  const auto fail = [&](const std::string& why) {
    ::unlink(tmp.c_str());
    return RuntimeError(fmt::format("cannot write {}: {}", what, why));
  };
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(fmt::format("'{}': {}", tmp, Errno()));
  const bool synced = ::fsync(fd) == 0;
  const std::string sync_error = synced ? "" : Errno();
  ::close(fd);
  if (!synced) throw fail(fmt::format("fsync: {}", sync_error));
  if (!RenameAndSyncFolder(tmp, target)) throw fail(Errno());
}

void WriteFileAtomically(const std::string& path, const std::string& text) {
  if (const int fd = DescriptorAlias(path); fd >= 0) {
    if (fd == 1) std::cout.flush();
    if (fd == 2) std::cerr.flush();
    WriteAll(fd, text, path);
    return;
  }
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw RuntimeError(fmt::format("cannot write '{}': it is a directory", path));
  if (exists && !S_ISREG(st.st_mode)) {
    WriteInPlace(path, text);
    return;
  }
  ReplaceAtomically(ResolveLink(path), text, exists ? &st : nullptr);
}

void CheckWritableOutput(const std::string& path, std::string_view what, bool regular_file_only) {
  if (path.empty()) throw InputError(fmt::format("{}: an empty path", what));
  const std::string shown = PrintablePath(path);
  if (const int fd = DescriptorAlias(path); fd >= 0) {
    if (regular_file_only) throw InputError(fmt::format("{} '{}' is not a regular file", what, shown));
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY)
      throw InputError(fmt::format("{} '{}': descriptor {} is not open for writing", what, shown, fd));
    return;
  }
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) throw InputError(fmt::format("{} '{}': {}", what, shown, Errno()));
  if (exists && S_ISDIR(st.st_mode)) throw InputError(fmt::format("{} '{}' is a directory", what, shown));
  if (exists && !S_ISREG(st.st_mode)) {
    if (regular_file_only) throw InputError(fmt::format("{} '{}' is not a regular file", what, shown));
    if (::access(path.c_str(), W_OK) != 0)
      throw InputError(fmt::format("{} '{}' is not writable: {}", what, shown, Errno()));
    return;
  }
  const std::string target = ResolveLink(path);
  const std::string folder = FolderOf(target);
  struct stat fst;
  if (::stat(folder.c_str(), &fst) != 0 || !S_ISDIR(fst.st_mode))
    throw InputError(fmt::format("{} '{}': directory '{}' does not exist", what, shown, PrintablePath(folder)));
  if (exists && ::access(path.c_str(), W_OK) != 0)
    throw InputError(fmt::format("{} '{}' is not writable: {}", what, shown, Errno()));
  // The write creates a temporary file (SQLite: its -wal and -shm files) in the folder: try one.
  const std::string probe = TempNameFor(target);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw InputError(
        fmt::format("{} '{}': cannot create files in '{}': {}", what, shown, PrintablePath(folder), Errno()));
  // A full file system (or an exhausted quota) still lets an empty file be made: one byte must fit.
  const bool wrote = ::write(fd, "\n", 1) == 1;
  const std::string why = wrote ? "" : Errno();
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote)
    throw InputError(fmt::format("{} '{}': cannot write in '{}': {}", what, shown, PrintablePath(folder), why));
}

std::string DataHome(bool create) {
  namespace fs = std::filesystem;
  fs::path dir;
  const auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : std::string();
  };
  if (const std::string d = env("CIUIC_DATA_DIR"); !d.empty()) {
    dir = d;
  } else if (const std::string x = env("XDG_DATA_HOME"); !x.empty() && fs::path(x).is_absolute()) {
    dir = fs::path(x) / "ciuic";
  } else if (const std::string h = env("HOME"); !h.empty()) {
    dir = fs::path(h) / ".local" / "share" / "ciuic";
  } else {
    throw InputError("no default data folder: HOME, XDG_DATA_HOME and CIUIC_DATA_DIR are unset (give --db and --out)");
  }
  std::error_code ec;
  if (create && !fs::is_directory(dir, ec)) {
    if (fs::exists(dir, ec))
      throw InputError(
          fmt::format("data folder '{}' is not a directory (CIUIC_DATA_DIR chooses another)", dir.string()));
    fs::create_directories(dir, ec);
    if (ec)
      throw InputError(fmt::format("cannot create data folder '{}': {} (CIUIC_DATA_DIR chooses another)", dir.string(),
                                   ec.message()));
    LogInfo("created {} for the default database and profiles (CIUIC_DATA_DIR chooses another folder)", dir.string());
  }
  return dir.string();
}

void CheckFileNameComponent(const std::string& name, std::string_view what) {
  const bool ok =
      !name.empty() && name.size() <= 128 && name[0] != '.' &&
      name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == std::string::npos;
  if (!ok)
    throw InputError(fmt::format("{} '{}' cannot be a file name: 1-128 of A-Z a-z 0-9 . _ - and not starting with '.'",
                                 what, PrintableLine(name)));
}

std::string PrintableLine(std::string_view text, std::size_t limit) {
  std::string shown(text.substr(0, limit));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  if (text.size() > limit) shown += "...";
  return shown;
}

std::string PrintablePath(std::string_view path, std::size_t limit) {
  if (path.size() <= limit) return PrintableLine(path, limit);
  const size_t tail = limit / 3, head = limit - tail;
  return PrintableLine(path.substr(0, head), head) + "..." + PrintableLine(path.substr(path.size() - tail), tail);
}

void CheckPathGiven(std::string_view option, const std::string& path) {
  if (path.empty()) throw InputError(fmt::format("{} '': an empty path; name a file", option));
}

void CheckDifferentFiles(std::string_view option_a, const std::string& path_a, std::string_view option_b,
                         const std::string& path_b) {
  if (path_a.empty() || path_b.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  bool same = fs::weakly_canonical(path_a, ec) == fs::weakly_canonical(path_b, ec) && !ec;
  if (!same) {
    struct stat a {
    }, b{};
    same = ::stat(path_a.c_str(), &a) == 0 && ::stat(path_b.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino && S_ISREG(a.st_mode);
  }
  if (same)
    throw InputError(fmt::format("{} '{}' and {} '{}' name the same file; give each its own", option_a,
                                 PrintableLine(path_a), option_b, PrintableLine(path_b)));
}

std::string IsoNow(bool milliseconds) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  if (!milliseconds) return std::string(buf) + "Z";
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  return fmt::format("{}.{:03}Z", buf, ms);
}

std::string CpuModelName() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      const size_t at = line.find_first_not_of(" \t", line.find(':') + 1);
      if (at != std::string::npos) return line.substr(at);
    }
  return "unknown";
}

}  // namespace ciuic
