#pragma once
// Host memory that every rank of a one-host communicator maps: each rank's window is a memfd of its
// own, and each rank maps every peer's (through /proc/PID/fd, the same permission single-copy
// transports need). A collective whose buffers lie in windows can read a peer's source and write a
// peer's result where they lie, with no copy through the transport: the runtime's ring does (as
// NCCL's user-buffer registration, nccl-tests' -R). 2 MiB pages where the kernel gives shared memory
// transparent huge pages (/sys/kernel/mm/transparent_hugepage/shmem_enabled: advise or always).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace ciuic {

class SharedWindow {
 public:
  // Collective over `comm`: every rank makes a window of `bytes` (rounded up to 2 MiB; the same on
  // every rank) and maps all the others'. UsageError on a device communicator, ranks on more than one
  // host or sizes that differ; RuntimeError
  // (the same on every rank, naming the ranks) when a window cannot be made or mapped.
  static std::shared_ptr<SharedWindow> Create(Communicator& comm, size_t bytes);
  // Create, but a window that cannot be made (every reason above, decided alike on every rank from
  // what the ranks gathered) returns null and its line in *why (when given); a failure of the transport itself
  // (a dead peer in a gather) still throws.
  static std::shared_ptr<SharedWindow> TryCreate(Communicator& comm, size_t bytes, std::string* why);
  ~SharedWindow();
  SharedWindow(const SharedWindow&) = delete;
  SharedWindow& operator=(const SharedWindow&) = delete;

  void* data() const { return bases_[rank_]; }
  size_t bytes() const { return bytes_; }
  int ranks() const { return static_cast<int>(bases_.size()); }
  // The same number on every rank for one window (from rank 0's memfd), never 0.
  uint64_t id() const { return id_; }
  // Rank r's window as this process maps it (r == the own rank: data()).
  char* Of(int r) const { return bases_[r]; }
  // The offset of [p, p + n) in this rank's window, or -1 when it does not lie inside it.
  int64_t OffsetOf(const void* p, size_t n) const;
  // Whether the kernel backs the windows with 2 MiB pages ("" when it does; else why not, in a line).
  static std::string HugePageNote();

 private:
  SharedWindow() = default;
  // Create's work: a window, or null with *usage true (a usage refusal) or false and *why.
  static std::shared_ptr<SharedWindow> Make(Communicator& comm, size_t bytes, bool* usage, std::string* why);
  int rank_ = 0;
  int fd_ = -1;
  size_t bytes_ = 0;
  uint64_t id_ = 0;
  std::vector<char*> bases_;
};

}  // namespace ciuic
