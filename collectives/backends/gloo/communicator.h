#pragma once
// Gloo backend (host buffers, gloo's TCP transport): `--backend gloo` measures gloo's own
// collectives, the transport PyTorch's CPU jobs use. The world bootstraps over a host control
// communicator (MPI under mpiexec, a local thread world in tests), as the NCCL backend does: its ranks
// meet through a key-value store (rank 0 serves one over TCP; --gloo-store DIR: gloo's FileStore on a
// shared file system), and the control plane keeps carrying timings and error counts.
// Types gloo reduces: fp32, fp64, fp16 (gloo::float16), int8, uint8, int32, int64 with sum, prod,
// min, max (avg = sum, then a division, as the MPI backend); bf16 and fp8 only where nothing is
// reduced. In-place alltoall and sendrecv are not offered (gloo sends and receives distinct buffers).
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "collectives/communicator.h"

namespace ciuic {

// Gloo's allreduce algorithms. kRing and kBcube run gloo::allreduce (the call PyTorch's gloo process
// group makes); kAuto leaves the choice to it (this gloo runs its ring). kRingChunked and
// kHalvingDoubling are gloo's algorithm classes (AllreduceRingChunked, AllreduceHalvingDoubling).
enum class GlooAlgo { kAuto, kRing, kRingChunked, kHalvingDoubling, kBcube };

// "ring", "ring-chunked", "halving-doubling", "bcube" (and "auto"). Throws UsageError.
GlooAlgo ParseGlooAlgo(std::string_view name);
// The algorithm that runs: kAuto is named by what gloo picks for it ("ring").
const char* GlooAlgoName(GlooAlgo a);

struct GlooOptions {
  GlooAlgo algo = GlooAlgo::kAuto;
  // Non-empty: rendezvous through gloo's FileStore in this directory (every rank must see it);
  // empty: through the TCP store rank 0 serves.
  std::string store_dir;
  // The network interface gloo binds; empty: $GLOO_SOCKET_IFNAME, else the host name's address
  // (loopback when it does not resolve and every rank is on this host).
  std::string iface;
  // Gloo's timeout for every call and the rendezvous; 0: none.
  double timeout_s = 60;
};

// Takes ownership of `control` (every rank calls it together). Throws RuntimeError, the same on
// every rank, when a rank cannot make its device or the ranks cannot meet.
std::unique_ptr<Communicator> MakeGlooWorld(std::unique_ptr<Communicator> control, const GlooOptions& options);

// A world for a job not started by mpiexec: the ranks publish their gloo addresses in the job's own
// store (torch.distributed's, through the C API) under `prefix` (unique per world in that store),
// and the control plane (timings, error counts, the runtime's per-bucket agreement) runs over a
// second gloo context of the same ranks. Throws RuntimeError when a rank cannot make its device or
// the ranks cannot meet before the timeout.
class KeyValueStore;
std::unique_ptr<Communicator> MakeGlooStoreWorld(std::shared_ptr<KeyValueStore> store, int rank, int size,
                                                 const std::string& prefix, const GlooOptions& options);

// A world for a job started by torchrun or srun (collectives/bootstrap/job_launch.h): rank 0 serves a TCP store on
// `port` of every interface, every rank reaches it at host:port (a name or an address; waiting for
// rank 0 up to the options' timeout) and the ranks form a store world through it. Throws
// RuntimeError when the ranks cannot meet, UsageError for a bad port.
std::unique_ptr<Communicator> MakeGlooTcpJobWorld(int rank, int size, const std::string& host, int port,
                                                  const GlooOptions& options);

// host (a name or an address) as a numeric address for a TCP store's endpoint, IPv4 first ("[addr]"
// for IPv6). RuntimeError naming the host when it does not resolve. Builds with gloo only.
std::string NumericAddress(const std::string& host);

// A roll call in the job's TCP store of MakeGlooTcpJobWorld (called before it): `arrive` marks this
// rank at `point` of its start-up; `absent` lists the world's ranks whose mark is missing ("rank 1,
// rank 3", "" when all are there). For naming the rank a start-up waits for in vain (NCCL's).
struct JobRollCall {
  std::function<void()> arrive;
  std::function<std::string()> absent;
};
JobRollCall MakeJobRollCall(const std::string& host, int port, int rank, int size, const std::string& point);

// "Gloo 0.5.0" of the headers this build compiled against; "" without Gloo.
std::string GlooVersion();

// Throws UsageError naming the option when `iface` is not a network interface of this host.
void CheckGlooInterface(const std::string& iface, const std::string& option);

}  // namespace ciuic
