// Issue 30, item 3: how fast can an out-of-place 2-rank allreduce go over this VM's single-copy
// transport (CMA: the receiving process copies from the peer's memory), against the same run's
// sendrecv? Two processes (fork), pinned to one core each, 2 MiB-page buffers (as core/buffer.cc
// gives), a socket pair as the barrier. Modes, each timed from a barrier to a barrier:
//   sendrecv  each rank copies the peer's whole source into its result (MPI's sendrecv over CMA);
//   ring      the runtime's ring on 2 ranks: the half this rank reduces arrives piece by piece in a
//             cache-sized slot, result = source + slot with streaming stores, then the other half is
//             copied from the peer's result (2.5 passes over memory per element);
//   push      the reduced piece is made in the slot and written to both results: to this rank's with
//             streaming stores, to the peer's with process_vm_writev (2.0 passes, more copying).
// Build: g++ -O2 -mavx2 -o passes passes.cc. Run: ./passes MIB ITERS PIECE_KIB (as root or with
// ptrace rights over the child). Prints each mode's median busbw (GB/s; 2 ranks: busbw = algbw).
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

int sock;

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void Barrier() {
  char c = 1;
  if (write(sock, &c, 1) != 1 || read(sock, &c, 1) != 1) std::abort();
}

void ReadPeer(pid_t pid, void* to, const void* from, size_t bytes) {
  iovec l{to, bytes}, r{const_cast<void*>(from), bytes};
  if (process_vm_readv(pid, &l, 1, &r, 1, 0) != static_cast<ssize_t>(bytes))
    std::perror("process_vm_readv"), std::abort();
}

void WritePeer(pid_t pid, void* to, const void* from, size_t bytes) {
  iovec l{const_cast<void*>(from), bytes}, r{to, bytes};
  if (process_vm_writev(pid, &l, 1, &r, 1, 0) != static_cast<ssize_t>(bytes))
    std::perror("process_vm_writev"), std::abort();
}

void AddStream(float* d, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i += 8)
    _mm256_stream_ps(d + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  _mm_sfence();
}

void AddInto(float* d, const float* a, size_t n) {
  for (size_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(d + i)));
}

void CopyStream(float* d, const float* a, size_t n) {
  for (size_t i = 0; i < n; i += 8) _mm256_stream_ps(d + i, _mm256_loadu_ps(a + i));
  _mm_sfence();
}

float* Pages(size_t bytes) {
  auto* p = static_cast<float*>(std::aligned_alloc(2u << 20, bytes));
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::atoi(argv[1]) : 256;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 10;
  const size_t piece = (argc > 3 ? std::atoi(argv[3]) : 1024) * size_t{1024};
  const size_t bytes = mib << 20, n = bytes / 4, half = n / 2, pf = piece / 4;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  const pid_t child = fork();
  const int rank = child == 0 ? 1 : 0;
  sock = sv[rank];
  cpu_set_t cs;
  CPU_ZERO(&cs);
  CPU_SET(rank, &cs);
  sched_setaffinity(0, sizeof cs, &cs);
  float *src = Pages(bytes), *dst = Pages(bytes), *slot = Pages(piece);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 1000 + rank), dst[i] = 0;
  struct {
    pid_t pid;
    float *src, *dst;
  } me{getpid(), src, dst}, peer;
  if (write(sock, &me, sizeof me) != sizeof me || read(sock, &peer, sizeof peer) != sizeof peer) return 1;
  const size_t mine = rank * half, other = (1 - rank) * half;
  const char* names[] = {"sendrecv", "ring", "push"};
  std::vector<double> t[3];
  for (int it = 0; it <= iters; ++it) {
    for (int m = 0; m < 3; ++m) {
      Barrier();
      const double t0 = Now();
      if (m == 0) {
        ReadPeer(peer.pid, dst, peer.src, bytes);
      } else if (m == 1) {
        for (size_t o = mine; o < mine + half; o += pf) {
          const size_t k = std::min(pf, mine + half - o);
          ReadPeer(peer.pid, slot, peer.src + o, k * 4);
          AddStream(dst + o, src + o, slot, k);
        }
        Barrier();
        for (size_t o = other; o < other + half; o += pf)
          ReadPeer(peer.pid, dst + o, peer.dst + o, std::min(pf, other + half - o) * 4);
      } else {
        for (size_t o = mine; o < mine + half; o += pf) {
          const size_t k = std::min(pf, mine + half - o);
          ReadPeer(peer.pid, slot, peer.src + o, k * 4);
          AddInto(slot, src + o, k);
          CopyStream(dst + o, slot, k);
          WritePeer(peer.pid, peer.dst + o, slot, k * 4);
        }
      }
      Barrier();
      if (it > 0) t[m].push_back(Now() - t0);  // the first round warms up
      if (m > 0 && it == iters) {
        for (size_t i = 0; i < n; i += 4099) {
          if (dst[i] != static_cast<float>(2 * (i % 1000) + 1)) {
            std::printf("rank %d %s: wrong sum at %zu\n", rank, names[m], i);
            return 1;
          }
        }
      }
    }
  }
  if (rank == 0) {
    for (int m = 0; m < 3; ++m) {
      std::sort(t[m].begin(), t[m].end());
      std::printf("%-9s %5zu MiB  piece %4zu KiB  median %.2f GB/s (slowest %.2f, fastest %.2f)\n", names[m], mib,
                  piece >> 10, bytes / t[m][t[m].size() / 2] / 1e9, bytes / t[m].back() / 1e9, bytes / t[m][0] / 1e9);
    }
    waitpid(child, nullptr, 0);
  }
  return 0;
}
