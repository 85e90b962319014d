#pragma once
// NCCL's tuner-plugin ABI as this plugin sees it: layouts and values only, written from the facts of
// NCCL's own headers and loader (tags of github.com/NVIDIA/nccl): src/include/nccl_common.h and
// src/include/plugin/nccl_tuner.h + plugin/tuner/tuner_v{2,3,4,5}.h of 2.28.9 (tuner_v6.h of 2.30) (identical but for
// formatting in 2.30.7), src/include/nccl_tuner.h of 2.19.3 (v1), src/plugin/tuner.cc and
// plugin_open.cc (lookup). NCCL installs none of these headers (nccl.h has only ncclResult_t), so
// every plugin declares them itself. The header is also read by the CPU test harness, which calls a
// plugin exactly as NCCL does.
//
// Symbols NCCL looks up in the library, first found wins (src/misc/tuner.cc up to 2.27, then
// src/plugin/tuner.cc):
//   2.19, 2.20     ncclTunerPlugin_v1
//   2.21           ncclTunerPlugin_v2
//   2.22, 2.23     ncclTunerPlugin_v3, _v2 (v2 through an adapter that applies its answer to the table)
//   2.24 .. 2.27   _v4, _v3, _v2
//   2.28, 2.29     _v5, _v4, _v3, _v2
//   2.30           _v6 (adds getChunkSize), _v5 .. _v2
// The library: NCCL_TUNER_PLUGIN as given to dlopen (a path works in every version); from 2.21 a bare
// NAME also tries libnccl-tuner-NAME.so; unset, libnccl-tuner.so; "none" disables plugins.
// Checked against those headers (sizes, alignments, member offsets, values) when written. The
// constants struct follows the core's tuner_v5.h, which NCCL fills: the copy in NCCL's example plugin
// (ext-tuner/example/nccl/tuner.h, 2.28.3 to 2.30.7) lacks its last member, perChMaxNVLSTreeBws.
// NCCL checks what init, getCollInfo and finalize return (NCCLCHECK in init.cc / enqueue.cc, 2.19 to
// 2.30): an error from init fails the communicator's creation, one from getCollInfo the collective.
#include <cstddef>
#include <cstdint>

namespace ciuic::nccl_abi {

// ncclResult_t (nccl.h): an int-sized C enum in every version.
enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

// ncclDebugLogLevel and the ncclDebugLogSubSys flags this plugin uses (same values 2.19 .. 2.30).
enum LogLevel : int {
  kLogNone = 0,
  kLogVersion = 1,
  kLogWarn = 2,
  kLogInfo = 3,
  kLogAbort = 4,
  kLogTrace = 5,
};
constexpr unsigned long kSubsysInit = 0x1;
constexpr unsigned long kSubsysTuning = 0x40;

// ncclDebugLogger_t: printf-style; NCCL prints the line only at or below NCCL_DEBUG's level and, for
// INFO, when NCCL_DEBUG_SUBSYS includes one of the flags.
using Logger = void (*)(LogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...);

// ncclFunc_t: the tuner is asked about the first five (2.28 added AlltoAll, Scatter and Gather as
// 8..10; NCCL runs those as sends and receives, without asking the tuner).
enum Func : int {
  kFuncBroadcast = 0,
  kFuncReduce = 1,
  kFuncAllGather = 2,
  kFuncReduceScatter = 3,
  kFuncAllReduce = 4,
  kFuncSendRecv = 5,
  kFuncSend = 6,
  kFuncRecv = 7,
};

// Rows and columns of the cost table (NCCL_ALGO_*, NCCL_PROTO_*). 2.19 .. 2.22 have 6 algorithms
// (no PAT); 2.23 and later 7. Each cell is NCCL's predicted time in us; NCCL picks the smallest cell
// >= 0, and marks a pair it will not run (unsupported, disabled by NCCL_ALGO/NCCL_PROTO) with -1.0
// (NCCL_ALGO_PROTO_IGNORE). A plugin prefers a pair by setting its cell to 0.0 and must never write
// over a -1.0. The table is one contiguous float[numAlgo][numProto] that NCCL passes as float**.
constexpr int kAlgoUndef = -1;
constexpr int kAlgoTree = 0;
constexpr int kAlgoRing = 1;
constexpr int kAlgoCollNetDirect = 2;
constexpr int kAlgoCollNetChain = 3;
constexpr int kAlgoNvls = 4;
constexpr int kAlgoNvlsTree = 5;
constexpr int kAlgoPat = 6;
constexpr int kNumAlgorithms = 7;  // NCCL_NUM_ALGORITHMS since 2.23
constexpr int kProtoUndef = -1;
constexpr int kProtoLl = 0;
constexpr int kProtoLl128 = 1;
constexpr int kProtoSimple = 2;
constexpr int kNumProtocols = 3;
constexpr float kAlgoProtoIgnore = -1.0f;

// ncclNvlDomainInfo_v5_t (2.28+).
struct NvlDomainInfoV5 {
  int n_nvl_domains;
  int min_ranks_per_nvl_domain;
  int max_ranks_per_nvl_domain;
};

// ncclTunerConstants_v5_t (2.28+): NCCL's model constants, handed to init to read or change. Sizes:
// 7 algorithms x 3 protocols, 3 link kinds (NVLink, PCI, net), 4 GPU generations (Volta .. Blackwell)
// x 3 scales (1, 2, >= 4 nodes).
struct TunerConstantsV5 {
  double base_latencies[7][3];
  double hw_latencies[3][7][3];
  double ll_max_bws[4][3];
  double per_ch_max_ring_ll128_bws[4][3];
  double per_ch_max_tree_ll128_bws[4][3];
  double per_ch_max_tree_bws[4][3];
  double per_ch_max_nvls_tree_bws[4][3];
};
static_assert(sizeof(TunerConstantsV5) == (21 + 63 + 5 * 12) * sizeof(double));

// ncclTuner_v5_t (2.28 .. 2.30): init gets the communicator's hash, the NVLink domains and the
// constants; getCollInfo edits the cost table and may set *nChannels (0 keeps NCCL's count).
struct TunerV5 {
  const char* name;
  Result (*init)(void** context, uint64_t comm_id, size_t n_ranks, size_t n_nodes, Logger log,
                 NvlDomainInfoV5* nvl_domain_info, TunerConstantsV5* constants);
  Result (*get_coll_info)(void* context, Func coll_type, size_t n_bytes, int num_pipe_ops, float** coll_cost_table,
                          int num_algo, int num_proto, int reg_buff, int* n_channels);
  Result (*finalize)(void* context);
};

// ncclTuner_v6_t (2.30; tuner_v6.h): v5 + getChunkSize, called with the algorithm, protocol and
// channels NCCL chose; the plugin may change *chunk_size (NCCL clamps it to its buffers). Same
// constants and NVLink-domain structs as v5. (v7, after 2.30, widens the constants to 5 GPU
// generations; not implemented: NCCL falls back to v6.)
struct TunerV6 {
  const char* name;
  Result (*init)(void** context, uint64_t comm_id, size_t n_ranks, size_t n_nodes, Logger log,
                 NvlDomainInfoV5* nvl_domain_info, TunerConstantsV5* constants);
  Result (*get_coll_info)(void* context, Func coll_type, size_t n_bytes, int num_pipe_ops, float** coll_cost_table,
                          int num_algo, int num_proto, int reg_buff, int* n_channels);
  Result (*finalize)(void* context);
  Result (*get_chunk_size)(void* context, Func coll_type, size_t n_bytes, int algo, int proto, int n_channels,
                           size_t* chunk_size);
};

// ncclTuner_v4_t (2.24 .. 2.30): v3 + regBuff (whether the user buffers can be registered).
struct TunerV4 {
  const char* name;
  Result (*init)(size_t n_ranks, size_t n_nodes, Logger log, void** context);
  Result (*get_coll_info)(void* context, Func coll_type, size_t n_bytes, int num_pipe_ops, float** coll_cost_table,
                          int num_algo, int num_proto, int reg_buff, int* n_channels);
  Result (*destroy)(void* context);
};

// ncclTuner_v3_t (2.22 .. 2.30): the first with the cost table.
struct TunerV3 {
  const char* name;
  Result (*init)(size_t n_ranks, size_t n_nodes, Logger log, void** context);
  Result (*get_coll_info)(void* context, Func coll_type, size_t n_bytes, int num_pipe_ops, float** coll_cost_table,
                          int num_algo, int num_proto, int* n_channels);
  Result (*destroy)(void* context);
};

// ncclTuner_v2_t (2.21 .. 2.30): no table; the plugin names an algorithm and a protocol (both or
// neither), and gets only whether CollNet and NVLS are possible.
struct TunerV2 {
  const char* name;
  Result (*init)(size_t n_ranks, size_t n_nodes, Logger log, void** context);
  Result (*get_coll_info)(void* context, Func coll_type, size_t n_bytes, int coll_net_support, int nvls_support,
                          int num_pipe_ops, int* algorithm, int* protocol, int* n_channels);
  Result (*destroy)(void* context);
};

// ncclTuner_v1_t (2.19, 2.20): v2 without a context (one plugin state per process).
struct TunerV1 {
  const char* name;
  Result (*init)(size_t n_ranks, size_t n_nodes, Logger log);
  Result (*get_coll_info)(Func coll_type, size_t n_bytes, int coll_net_support, int nvls_support, int num_pipe_ops,
                          int* algorithm, int* protocol, int* n_channels);
  Result (*destroy)();
};

}  // namespace ciuic::nccl_abi
