#include "collectives/shared_window.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "core/error.h"

namespace ciuic {

namespace {

constexpr size_t kPage = size_t{2} << 20;

// What every rank tells the others: where it runs, and the memfd its window is.
struct Identity {
  char host[64];
  char boot[40];
  int64_t pid;
  int64_t fd;
  uint64_t dev, ino;  // the memfd's file (a peer checks it opened this one, not a namesake's)
  uint64_t bytes;     // the window's size, as this rank asked for it (rounded up)
  int64_t error;      // errno of making the own window; 0 when it was made
};

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// One line naming every rank whose errno is set, for a failure all ranks report alike.
std::string Failures(const std::vector<int64_t>& errors, const char* what) {
  std::string out;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r] == 0) continue;
    out +=
        fmt::format("{}rank {} {}: {}", out.empty() ? "" : "; ", r, what, std::strerror(static_cast<int>(errors[r])));
  }
  return out;
}

}  // namespace

std::shared_ptr<SharedWindow> SharedWindow::Create(Communicator& comm, size_t bytes) {
  bool usage = false;
  std::string why;
  auto w = Make(comm, bytes, &usage, &why);
  if (!w && usage) throw UsageError(why);
  if (!w) throw RuntimeError(why);
  return w;
}

std::shared_ptr<SharedWindow> SharedWindow::TryCreate(Communicator& comm, size_t bytes, std::string* why) {
  bool usage = false;
  std::string line;
  return Make(comm, bytes, &usage, why ? why : &line);
}

std::shared_ptr<SharedWindow> SharedWindow::Make(Communicator& comm, size_t bytes, bool* usage, std::string* why) {
  // Every refusal below is decided from what every rank sees alike (its own device, the gathered
  // identities and reports), so every rank returns it.
  auto refuse = [&](bool is_usage, std::string line) {
    *usage = is_usage;
    *why = std::move(line);
    return std::shared_ptr<SharedWindow>();
  };
  if (comm.Device() != DeviceKind::kCpu)
    return refuse(true, fmt::format("shared windows are host memory; the {} communicator's buffers are on a device",
                                    comm.BackendName()));
  const int p = comm.Size();
  std::shared_ptr<SharedWindow> w(new SharedWindow());
  w->rank_ = comm.Rank();
  w->bytes_ = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  w->bases_.assign(p, nullptr);

  Identity mine{};
  gethostname(mine.host, sizeof mine.host - 1);
  const std::string boot = BootId();
  std::memcpy(mine.boot, boot.data(), std::min(boot.size(), sizeof mine.boot - 1));
  mine.pid = getpid();
  w->fd_ = memfd_create("ciuic-window", MFD_CLOEXEC);
  if (w->fd_ < 0 || ftruncate(w->fd_, static_cast<off_t>(w->bytes_)) != 0) {
    mine.error = errno;
  } else {
    // Ask for huge pages (refused where shared memory has none: 4 KiB pages then), then fault in
    // every page: the first touch of a fresh page (allocation, zeroing) must not fall into a timed
    // call, in this process nor in the peers' (kernels before 5.14 lack MADV_POPULATE_WRITE: EINVAL,
    // and the pages fault at first use).
    void* base = mmap(nullptr, w->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, w->fd_, 0);
    if (base == MAP_FAILED) {
      mine.error = errno;
    } else {
      madvise(base, w->bytes_, MADV_HUGEPAGE);
      if (madvise(base, w->bytes_, MADV_POPULATE_WRITE) != 0 && errno != EINVAL) mine.error = errno;
      w->bases_[w->rank_] = static_cast<char*>(base);
    }
  }
  mine.fd = w->fd_;
  mine.bytes = w->bytes_;
  struct stat st {};
  if (mine.error == 0 && fstat(w->fd_, &st) != 0) mine.error = errno;
  mine.dev = st.st_dev;
  mine.ino = st.st_ino;
  std::vector<Identity> all(p);
  comm.HostAllGather(&mine, all.data(), sizeof mine);

  std::set<std::string> hosts;
  for (const Identity& id : all)
    hosts.insert(std::string(id.host, strnlen(id.host, sizeof id.host)) + "/" +
                 std::string(id.boot, strnlen(id.boot, sizeof id.boot)));
  if (hosts.size() > 1)
    return refuse(true, fmt::format("shared windows need every rank on one host; these {} ranks run on {} hosts", p,
                                    hosts.size()));
  for (int r = 1; r < p; ++r)
    if (all[r].bytes != all[0].bytes)
      return refuse(true, fmt::format("shared windows are made alike on every rank: rank {} asked for {} bytes, rank 0 "
                                      "for {} (rounded to 2 MiB pages)",
                                      r, all[r].bytes, all[0].bytes));
  w->id_ = all[0].dev * 0x9E3779B97F4A7C15ull ^ all[0].ino ^ static_cast<uint64_t>(all[0].pid) << 40;
  if (w->id_ == 0) w->id_ = 1;
  std::vector<int64_t> errors(p);
  for (int r = 0; r < p; ++r) errors[r] = all[r].error;
  if (std::string f = Failures(errors, "could not make its shared window"); !f.empty()) return refuse(false, f);

  int64_t error = 0;
  int first_failed = -1;
  for (int r = 0; r < p && error == 0; ++r) {
    if (r == w->rank_) continue;
    const std::string path = fmt::format("/proc/{}/fd/{}", all[r].pid, all[r].fd);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      error = errno;
      first_failed = r;
      break;
    }
    struct stat opened {};
    if (fstat(fd, &opened) != 0 || opened.st_dev != all[r].dev || opened.st_ino != all[r].ino) {
      // ESRCH: another process's file under that pid (the ranks live in different PID namespaces)
      error = opened.st_ino == 0 ? errno : ESRCH;
      first_failed = r;
      close(fd);
      break;
    }
    void* base = mmap(nullptr, w->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      error = errno;
      first_failed = r;
    } else {
      madvise(base, w->bytes_, MADV_HUGEPAGE);
      madvise(base, w->bytes_, MADV_POPULATE_WRITE);  // the owner's pages, into this process's table
      w->bases_[r] = static_cast<char*>(base);
    }
    close(fd);
  }
  // Every rank must hold every mapping before any rank may use (or drop) its window.
  const int64_t report[2] = {error, first_failed};
  std::vector<int64_t> reports(2 * static_cast<size_t>(p));
  comm.HostAllGather(report, reports.data(), sizeof report);
  std::string failed;
  for (int r = 0; r < p; ++r) {
    if (reports[2 * r] == 0) continue;
    failed += fmt::format("{}rank {} could not map rank {}'s shared window: {}", failed.empty() ? "" : "; ", r,
                          reports[2 * r + 1], std::strerror(static_cast<int>(reports[2 * r])));
  }
  if (!failed.empty()) return refuse(false, failed);
  return w;
}

SharedWindow::~SharedWindow() {
  for (char* b : bases_)
    if (b) munmap(b, bytes_);
  if (fd_ >= 0) close(fd_);
}

int64_t SharedWindow::OffsetOf(const void* p, size_t n) const {
  const auto a = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(data());
  if (a < base || a - base > bytes_ || n > bytes_ - (a - base)) return -1;
  return static_cast<int64_t>(a - base);
}

std::string SharedWindow::HugePageNote() {
  const char* path = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t open = line.find('['), close_at = line.find(']');
  if (open == std::string::npos || close_at == std::string::npos || close_at < open) return "";
  const std::string mode = line.substr(open + 1, close_at - open - 1);
  if (mode != "never" && mode != "deny") return "";
  return fmt::format("shared windows use 4 KiB pages ({} is [{}]; advise gives them 2 MiB pages)", path, mode);
}

}  // namespace ciuic
