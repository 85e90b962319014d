// Standalone companion of the runtime's ring over shared windows (issue 30, item 3), grown from
// ../2026-11-28-ring-push-cma/passes.cc: the same two pinned processes, 2 MiB-page private buffers
// and socket-pair barrier, and its three CMA modes (sendrecv, ring, push), plus four over buffers both
// processes map (MAP_SHARED before fork; shared memory gets 2 MiB pages only with
// /sys/kernel/mm/transparent_hugepage/shmem_enabled = advise or always):
//   mcopy  each rank copies the peer's whole source into its result (a sendrecv over the mapping);
//   mring  result half = own + peer source streamed, barrier, the other half copied from the peer's result;
//   mpush  per piece: the sum streamed into the own result, then copied from there into the peer's
//          (what the runtime does on 2 ranks; 2.5 passes);
//   mslot  per piece: the sum into a cache-resident slot, streamed into both results (2.0 passes).
// Build: g++ -O2 -mavx2 -o passes passes-mapped.cc. Run: ./passes MIB ITERS PIECE_KIB.
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

float* Shared(size_t bytes) {
  auto* p = static_cast<float*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
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
  float* shs[2] = {Shared(bytes), Shared(bytes)};
  float* shd[2] = {Shared(bytes), Shared(bytes)};
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
  const char* names[] = {"sendrecv", "ring", "push", "mcopy", "mring", "mpush", "mslot"};
  float *ms = shs[rank], *md = shd[rank], *ps = shs[1 - rank], *pd = shd[1 - rank];
  for (size_t i = 0; i < n; ++i) ms[i] = static_cast<float>(i % 1000 + rank), md[i] = 0;
  std::vector<double> t[7];
  for (int it = 0; it <= iters; ++it) {
    for (int m = 0; m < 7; ++m) {
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
      } else if (m == 3) {
        CopyStream(md, ps, n);
      } else if (m == 4) {
        AddStream(md + mine, ms + mine, ps + mine, half);
        Barrier();
        CopyStream(md + other, pd + other, half);
      } else if (m == 6) {
        for (size_t o = mine; o < mine + half; o += pf) {
          const size_t k = std::min(pf, mine + half - o);
          for (size_t i = 0; i < k; i += 8)
            _mm256_storeu_ps(slot + i, _mm256_add_ps(_mm256_loadu_ps(ms + o + i), _mm256_loadu_ps(ps + o + i)));
          CopyStream(md + o, slot, k);
          CopyStream(pd + o, slot, k);
        }
      } else if (m == 5) {
        for (size_t o = mine; o < mine + half; o += pf) {
          const size_t k = std::min(pf, mine + half - o);
          AddStream(md + o, ms + o, ps + o, k);
          CopyStream(pd + o, md + o, k);
        }
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
      if (m > 0 && m != 3 && it == iters) {
        float* chk = m >= 3 ? md : dst;
        if (m == 6)
          for (size_t i = 0; i < n; i += 4099)
            if (md[i] != static_cast<float>(2 * (i % 1000) + 1)) return 2;
        for (size_t i = 0; i < n; i += 4099) {
          if (chk[i] != static_cast<float>(2 * (i % 1000) + 1)) {
            std::printf("rank %d %s: wrong sum at %zu\n", rank, names[m], i);
            return 1;
          }
        }
      }
    }
  }
  if (rank == 0) {
    for (int m = 0; m < 7; ++m) {
      std::sort(t[m].begin(), t[m].end());
      std::printf("%-9s %5zu MiB  piece %4zu KiB  median %.2f GB/s (slowest %.2f, fastest %.2f)\n", names[m], mib,
                  piece >> 10, bytes / t[m][t[m].size() / 2] / 1e9, bytes / t[m].back() / 1e9, bytes / t[m][0] / 1e9);
    }
    waitpid(child, nullptr, 0);
  }
  return 0;
}
