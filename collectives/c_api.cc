// The C API (ciuic.h) over ciuic::Runtime, the codecs and the profile reader: exceptions become
// status codes and a per-thread message. Built into the static ciuic_collectives and, with only the
// ciuic_* symbols exported, into libciuic.so (the Python package loads that through ctypes).
#include "collectives/ciuic.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/algorithms/hops.h"
#include "collectives/backends/gloo/communicator.h"
#include "collectives/backends/local/communicator.h"
#include "collectives/backends/nccl/communicator.h"
#include "collectives/bootstrap/store.h"
#include "collectives/crossover.h"
#include "collectives/profile.h"
#include "collectives/runtime.h"
#include "collectives/runtime_async.h"
#include "collectives/staging_comm.h"
#include "collectives/state_format.h"
#include "core/buffer.h"
#include "core/config.h"
#include "core/error.h"
#include "kernels/codec.h"
#include "kernels/codec_kernels.h"
#include "kernels/train_kernels.h"

#if CIUIC_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#endif
#if CIUIC_HAVE_MPI
#include <mpi.h>

#include "collectives/backends/mpi/communicator.h"
#endif

struct ciuic_comm {
  ciuic::Communicator* comm;
  std::unique_ptr<ciuic::Communicator> owned;
};
struct ciuic_runtime {
  std::unique_ptr<ciuic::Runtime> rt;          // ciuic_runtime_create: one configuration, the caller's thread
  std::unique_ptr<ciuic::AsyncRuntime> async;  // ciuic_runtime_create_profile: rules, its own thread
};
struct ciuic_request {
  std::shared_ptr<ciuic::AsyncRequest> req;  // null: ran at once (status below)
  ciuic_status_t status = CIUIC_OK;
  std::string error;
};
struct ciuic_codec {
  ciuic::Codec codec;
};
struct ciuic_codec_state {
  ciuic::Codec codec;  // the codec it was made for (its name and buffer shapes are checked on use)
  size_t n;
  ciuic::CodecState st;
};
struct ciuic_profile {
  ciuic::Profile profile;
};

namespace {

thread_local std::string g_last_error;

template <class F>
ciuic_status_t Guard(F&& f) {
  try {
    f();
    g_last_error.clear();
    return CIUIC_OK;
  } catch (const ciuic::UsageError& e) {
    g_last_error = e.what();
    return CIUIC_ERR_USAGE;
  } catch (const ciuic::InputError& e) {
    g_last_error = e.what();
    return CIUIC_ERR_INPUT;
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return CIUIC_ERR_RUNTIME;
  }
}

// Whether an engine of this configuration chooses its algorithm per size from a crossover table.
bool UsesCrossover(const ciuic::AlgoConfig& a) {
  return a.algo == ciuic::AllReduceAlgo::kAuto && a.codec.kind == ciuic::CodecKind::kNone &&
         a.precision == ciuic::DType::kFloat32;
}

void Require(const void* p, const char* what) {
  if (!p) throw ciuic::UsageError(std::string(what) + " is null");
}

// A finished request's status as the exception Guard turns back into it.
void ThrowStatus(ciuic::WorkStatus s, const std::string& error) {
  switch (s) {
    case ciuic::WorkStatus::kOk:
      return;
    case ciuic::WorkStatus::kUsage:
      throw ciuic::UsageError(error);
    case ciuic::WorkStatus::kInput:
      throw ciuic::InputError(error);
    case ciuic::WorkStatus::kRuntime:
      throw ciuic::RuntimeError(error);
  }
}

ciuic::DType DTypeOf(ciuic_dtype_t t) {
  switch (t) {
    case CIUIC_FP32:
      return ciuic::DType::kFloat32;
    case CIUIC_FP16:
      return ciuic::DType::kFloat16;
    case CIUIC_BF16:
      return ciuic::DType::kBFloat16;
  }
  throw ciuic::UsageError(fmt::format("dtype {}: expected CIUIC_FP32, CIUIC_FP16 or CIUIC_BF16", static_cast<int>(t)));
}

ciuic::AsyncRuntime& AsyncOf(ciuic_runtime_t* rt, const char* what) {
  Require(rt, "runtime");
  if (!rt->async) throw ciuic::UsageError(fmt::format("{} needs a runtime from ciuic_runtime_create_profile", what));
  return *rt->async;
}

// ---- codec state bytes: collectives/state_format.h ---------------------------------------------
void CheckState(const ciuic_codec* codec, const ciuic_codec_state* state, size_t n) {
  if (!state) return;
  if (state->codec.Name() != codec->codec.Name())
    throw ciuic::UsageError(
        fmt::format("the codec state was made for codec {}, not {}", state->codec.Name(), codec->codec.Name()));
  if (state->n != n)
    throw ciuic::UsageError(fmt::format("the codec state was made for {} elements, not {}", state->n, n));
}

void CheckWire(const ciuic_codec* codec, size_t n, size_t wire_bytes, const char* what) {
  const size_t want = codec->codec.WireBytes(n);
  if (wire_bytes != want)
    throw ciuic::UsageError(fmt::format("{}: {} bytes given, codec {} encodes {} elements in {}", what, wire_bytes,
                                        codec->codec.Name(), n, want));
}

size_t ChunkAlign(const ciuic::Codec& c) {
  const ciuic::CodecKind k = c.spec().kind;
  return ciuic::CodecIsBlockScaled(k) || k == ciuic::CodecKind::kSign1 ? c.spec().block : 1;
}

void CopyOut(char* dst, size_t cap, const std::string& s, const char* field) {
  if (s.size() + 1 > cap)
    throw ciuic::InputError(
        fmt::format("profile rule {} '{}' is longer than the {} bytes ciuic_rule_t holds", field, s, cap - 1));
  std::memcpy(dst, s.c_str(), s.size() + 1);
}

void FillRule(const ciuic::ProfileRule& r, ciuic_rule_t* out) {
  ciuic_rule_t x{};
  CopyOut(x.op, sizeof x.op, r.op, "op");
  CopyOut(x.algo, sizeof x.algo, r.algo, "algo");
  CopyOut(x.codec, sizeof x.codec, ciuic::CodecName(ciuic::ParseCodec(r.codec)), "codec");
  CopyOut(x.precision, sizeof x.precision, r.precision, "precision");
  CopyOut(x.gate, sizeof x.gate, r.gate, "gate");
  x.min_bytes = r.min_bytes;
  x.max_bytes = r.max_bytes;
  x.bucket_bytes = r.bucket_bytes;
  x.streams = r.streams;
  x.hierarchy_depth = r.hierarchy_depth;
  x.predicted_us = r.predicted_us;
  x.measured_us = r.measured_us;
  *out = x;
}

#if CIUIC_HAVE_MPI
bool g_mpi_ours = false;  // ciuic_mpi_init initialised MPI (so ciuic_mpi_finalize ends it)
#endif

}  // namespace

extern "C" {

const char* ciuic_status_string(ciuic_status_t s) {
  switch (s) {
    case CIUIC_OK:
      return "ok";
    case CIUIC_ERR_USAGE:
      return "bad usage";
    case CIUIC_ERR_RUNTIME:
      return "runtime failure";
    case CIUIC_ERR_INPUT:
      return "bad input";
  }
  return "unknown status";
}

const char* ciuic_last_error(void) { return g_last_error.c_str(); }

ciuic_status_t ciuic_local_run(int nranks, void (*fn)(ciuic_comm_t*, void*), void* arg) {
  return Guard([&] {
    Require(reinterpret_cast<const void*>(fn), "fn");
    if (nranks < 1 || nranks > 1024) throw ciuic::UsageError("nranks must be in 1..1024");
    ciuic::RunLocalRanks(nranks, [&](ciuic::Communicator& c) {
      ciuic_comm handle{&c, nullptr};
      fn(&handle, arg);
    });
  });
}

ciuic_status_t ciuic_mpi_world(ciuic_comm_t** out) {
  return Guard([&] {
    Require(out, "out");
#if CIUIC_HAVE_MPI
    auto world = ciuic::MakeMpiWorld();
    auto* h = new ciuic_comm{world.get(), std::move(world)};
    *out = h;
#else
    throw ciuic::UsageError("this build has no MPI");
#endif
  });
}

void ciuic_comm_destroy(ciuic_comm_t* comm) { delete comm; }
int ciuic_comm_rank(const ciuic_comm_t* comm) { return comm ? comm->comm->Rank() : -1; }
int ciuic_comm_size(const ciuic_comm_t* comm) { return comm ? comm->comm->Size() : -1; }

ciuic_status_t ciuic_runtime_create(ciuic_comm_t* comm, const char* algo, const char* codec, size_t bucket_bytes,
                                    ciuic_runtime_t** out) {
  return Guard([&] {
    Require(comm, "comm");
    Require(out, "out");
    ciuic::RuntimeConfig cfg;
    // "native:bf16" / "native:fp16": the transport's allreduce in a 16-bit precision.
    std::string a = algo ? algo : "auto";
    if (a.rfind("native:", 0) == 0) {
      cfg.algo.precision = ciuic::ParsePrecision(a.substr(7));
      a = "native";
    }
    cfg.algo.algo = ciuic::ParseAlgo(a);
    cfg.algo.codec = ciuic::ParseCodec(codec ? codec : "none");
    if (bucket_bytes) cfg.bucket_bytes = bucket_bytes;
    if (UsesCrossover(cfg.algo)) cfg.algo.crossover = ciuic::RuntimeCrossover(*comm->comm);
    auto rt = std::make_unique<ciuic_runtime>();
    rt->rt = std::make_unique<ciuic::Runtime>(*comm->comm, cfg);
    if (const char* trace = std::getenv("CIUIC_TRACE"); trace && *trace) rt->rt->SetTrace(trace);
    *out = rt.release();
  });
}

void ciuic_runtime_destroy(ciuic_runtime_t* rt) { delete rt; }

ciuic_status_t ciuic_allreduce(ciuic_runtime_t* rt, float* data, size_t n, uint64_t tensor_id, int average) {
  return Guard([&] {
    Require(rt, "runtime");
    if (n) Require(data, "data");
    if (rt->async) {
      std::string error;
      const auto status =
          rt->async->Enqueue(data, n, ciuic::DType::kFloat32, tensor_id, average != 0, nullptr, {})->Wait(&error);
      ThrowStatus(status, error);
    } else {
      rt->rt->AllReduce(data, n, tensor_id, average != 0);
    }
  });
}

ciuic_status_t ciuic_runtime_save(ciuic_runtime_t* rt, const char* path) {
  return Guard([&] {
    Require(rt, "runtime");
    Require(path, "path");
    if (rt->async) {
      rt->async->Call([&](ciuic::RuleRuntime& r) { r.Save(path); });
    } else {
      rt->rt->Save(path);
    }
  });
}

ciuic_status_t ciuic_runtime_load(ciuic_runtime_t* rt, const char* path) {
  return Guard([&] {
    Require(rt, "runtime");
    // Load is collective: a rank without a path still takes part (and fails), so its peers fail
    // with it instead of waiting for it.
    const std::string p = path ? path : "";
    if (rt->async) {
      rt->async->Call([&](ciuic::RuleRuntime& r) { r.Load(p); });
    } else {
      rt->rt->Load(p);
    }
  });
}

ciuic_status_t ciuic_runtime_set_timeout(ciuic_runtime_t* rt, double seconds) {
  return Guard([&] {
    Require(rt, "runtime");
    if (rt->async) {
      rt->async->Call([&](ciuic::RuleRuntime& r) { r.SetTimeout(seconds); });
    } else {
      rt->rt->SetTimeout(seconds);
    }
  });
}

ciuic_status_t ciuic_runtime_set_trace(ciuic_runtime_t* rt, const char* path) {
  return Guard([&] {
    Require(rt, "runtime");
    const std::string p = path ? path : "";
    if (rt->async) {
      rt->async->Call([&](ciuic::RuleRuntime& r) { r.SetTrace(p); });
    } else {
      rt->rt->SetTrace(p);
    }
  });
}

ciuic_status_t ciuic_runtime_trace_flush(ciuic_runtime_t* rt) {
  return Guard([&] {
    Require(rt, "runtime");
    if (rt->async) {
      rt->async->Call([&](ciuic::RuleRuntime& r) { r.FlushTrace(); });
    } else {
      rt->rt->FlushTrace();
    }
  });
}

ciuic_status_t ciuic_runtime_counters(const ciuic_runtime_t* rt, double* wire_bytes, double* raw_bytes) {
  return Guard([&] {
    Require(rt, "runtime");
    ciuic::Counters c;
    if (rt->async) {
      rt->async->Call([&](ciuic::RuleRuntime& r) { c = r.counters(); });
    } else {
      c = rt->rt->counters();
    }
    if (wire_bytes) *wire_bytes = c.wire_bytes;
    if (raw_bytes) *raw_bytes = c.raw_bytes;
  });
}

ciuic_status_t ciuic_comm_create_store(int rank, int size, const char* prefix, const char* device,
                                       ciuic_store_set_fn set, ciuic_store_get_fn get, void* user, double timeout_s,
                                       ciuic_comm_t** out) {
  return Guard([&] {
    Require(out, "out");
    Require(prefix, "prefix");
    Require(reinterpret_cast<const void*>(set), "set");
    Require(reinterpret_cast<const void*>(get), "get");
    const std::string dev = device ? device : "cpu";
    if (dev != "cpu" && dev != "cuda" && dev != "cuda-gloo")
      throw ciuic::UsageError(fmt::format("device '{}': expected cpu, cuda or cuda-gloo", dev));
    if (!(timeout_s >= 0) || !std::isfinite(timeout_s))
      throw ciuic::UsageError(fmt::format("timeout {}: expected a non-negative number of seconds", timeout_s));
    ciuic::GlooOptions options;
    options.timeout_s = timeout_s;
    auto world = ciuic::MakeGlooStoreWorld(ciuic::MakeCallbackStore(set, get, user), rank, size, prefix, options);
    if (dev == "cuda") {
#if CIUIC_HAVE_NCCL
      // The caller's current device (torch.cuda.set_device); the unique id over the gloo control plane.
      world = ciuic::MakeNcclWorld(std::move(world), ciuic::CudaCurrentDevice());
#else
      throw ciuic::UsageError("device cuda: this libciuic was built without CUDA and NCCL");
#endif
    } else if (dev == "cuda-gloo") {
#if CIUIC_HAVE_CUDA
      world = ciuic::MakeDeviceStagingCommunicator(std::move(world));  // device buffers, gloo's wire
#else
      throw ciuic::UsageError("device cuda-gloo: this libciuic was built without CUDA");
#endif
    }
    auto* h = new ciuic_comm{world.get(), std::move(world)};
    *out = h;
  });
}

const char* ciuic_comm_device(const ciuic_comm_t* comm) {
  if (!comm) return "";
  return comm->comm->Device() == ciuic::DeviceKind::kCuda ? "cuda" : "cpu";  // cuda-gloo's buffers: cuda
}

ciuic_status_t ciuic_runtime_create_profile(ciuic_comm_t* comm, const struct ciuic_profile* profile, uint32_t flags,
                                            int ranks_per_node, ciuic_runtime_t** out) {
  return Guard([&] {
    Require(comm, "comm");
    Require(profile, "profile");
    Require(out, "out");
    if (flags & ~uint32_t{CIUIC_RUNTIME_PROPAGATE_NONFINITE | CIUIC_RUNTIME_ANY_WORLD})
      throw ciuic::UsageError(fmt::format("runtime flags {:#x}: unknown bits", flags));
    if (ranks_per_node < 0) throw ciuic::UsageError("ranks_per_node must be 0 (by host name) or positive");
    if (!(flags & CIUIC_RUNTIME_ANY_WORLD)) ciuic::CheckProfileWorld(profile->profile, *comm->comm, ranks_per_node);
    ciuic::RuleRuntimeConfig cfg;
    cfg.profile = std::make_shared<const ciuic::Profile>(profile->profile);
    cfg.fixed.propagate_nonfinite = (flags & CIUIC_RUNTIME_PROPAGATE_NONFINITE) != 0;
    cfg.fixed.algo.ranks_per_node = ranks_per_node;
    auto rt = std::make_unique<ciuic_runtime>();
    rt->async = std::make_unique<ciuic::AsyncRuntime>(*comm->comm, std::move(cfg));
    if (const char* trace = std::getenv("CIUIC_TRACE"); trace && *trace) {
      const std::string p = trace;
      rt->async->Call([&](ciuic::RuleRuntime& r) { r.SetTrace(p); });
    }
    *out = rt.release();
  });
}

ciuic_status_t ciuic_allreduce_async(ciuic_runtime_t* rt, void* data, size_t n, ciuic_dtype_t dtype, uint64_t tensor_id,
                                     int average, void* stream, ciuic_done_fn done, void* user, ciuic_request_t** out) {
  return Guard([&] {
    Require(rt, "runtime");
    if (n) Require(data, "data");
    const ciuic::DType type = DTypeOf(dtype);
    auto req = std::make_unique<ciuic_request>();
    if (!rt->async) {
      // The synchronous runtime: reduced now, on this thread.
      if (type != ciuic::DType::kFloat32)
        throw ciuic::UsageError(
            "a runtime from ciuic_runtime_create reduces fp32 only (ciuic_runtime_create_profile "
            "takes fp16 and bf16)");
      const ciuic_status_t s = Guard([&] { rt->rt->AllReduce(static_cast<float*>(data), n, tensor_id, average != 0); });
      req->status = s;
      req->error = g_last_error;
      if (done) done(user, s, req->error.c_str());
      if (!done && !out && s != CIUIC_OK) ThrowStatus(static_cast<ciuic::WorkStatus>(s), req->error);
    } else {
      ciuic::AsyncRuntime::Completion completion;
      if (done)
        completion = [done, user](ciuic::WorkStatus s, const std::string& e) {
          done(user, static_cast<ciuic_status_t>(s), e.c_str());
        };
      req->req = rt->async->Enqueue(data, n, type, tensor_id, average != 0, stream, std::move(completion));
    }
    if (out) *out = req.release();
  });
}

ciuic_status_t ciuic_request_test(const ciuic_request_t* req, int* done) {
  return Guard([&] {
    Require(req, "request");
    Require(done, "done");
    *done = !req->req || req->req->Done() ? 1 : 0;
  });
}

ciuic_status_t ciuic_request_wait(const ciuic_request_t* req) {
  return Guard([&] {
    Require(req, "request");
    if (!req->req) {
      if (req->status != CIUIC_OK) ThrowStatus(static_cast<ciuic::WorkStatus>(req->status), req->error);
      return;
    }
    std::string error;
    ThrowStatus(req->req->Wait(&error), error);
  });
}

ciuic_status_t ciuic_request_stream_wait(const ciuic_request_t* req, void* stream) {
  return Guard([&] {
    Require(req, "request");
    if (!req->req) {
      if (req->status != CIUIC_OK) ThrowStatus(static_cast<ciuic::WorkStatus>(req->status), req->error);
      return;
    }
    std::string error;
    ThrowStatus(req->req->StreamWait(stream, &error), error);
  });
}

void ciuic_request_destroy(ciuic_request_t* req) { delete req; }

ciuic_status_t ciuic_runtime_residual(ciuic_runtime_t* rt, uint64_t tensor_id, size_t n, ciuic_dtype_t dtype,
                                      float* out) {
  return Guard([&] {
    auto& a = AsyncOf(rt, "ciuic_runtime_residual");
    if (n) Require(out, "out");
    const ciuic::DType type = DTypeOf(dtype);
    a.Call([&](ciuic::RuleRuntime& r) {
      const auto v = r.Residual(tensor_id, n, type);
      std::copy(v.begin(), v.end(), out);
    });
  });
}

ciuic_status_t ciuic_runtime_set_residual(ciuic_runtime_t* rt, uint64_t tensor_id, size_t n, ciuic_dtype_t dtype,
                                          const float* values, int* kept) {
  return Guard([&] {
    auto& a = AsyncOf(rt, "ciuic_runtime_set_residual");
    if (n) Require(values, "values");
    const ciuic::DType type = DTypeOf(dtype);
    bool k = false;
    a.Call([&](ciuic::RuleRuntime& r) { k = r.SetResidual(tensor_id, n, type, values); });
    if (kept) *kept = k ? 1 : 0;
  });
}

ciuic_status_t ciuic_runtime_forget(ciuic_runtime_t* rt, uint64_t tensor_id) {
  return Guard([&] { AsyncOf(rt, "ciuic_runtime_forget").Call([&](ciuic::RuleRuntime& r) { r.Forget(tensor_id); }); });
}

ciuic_status_t ciuic_runtime_config_of(ciuic_runtime_t* rt, size_t n, ciuic_dtype_t dtype, char* buf, size_t cap) {
  return Guard([&] {
    Require(rt, "runtime");
    Require(buf, "buf");
    const ciuic::DType type = DTypeOf(dtype);
    std::string key;
    if (rt->async) {
      rt->async->Call([&](ciuic::RuleRuntime& r) { key = ciuic::ConfigKey(r.ConfigFor(n, type)); });
    } else {
      if (type != ciuic::DType::kFloat32)
        throw ciuic::UsageError("a runtime from ciuic_runtime_create reduces fp32 only");
      const ciuic::RuntimeConfig& c = rt->rt->config();
      key = ciuic::ConfigKey(c);
      // auto: the algorithm its crossover runs for the message's first bucket, and where the table came from.
      if (const ciuic::Crossover* table = rt->rt->engine().crossover())
        key +=
            fmt::format(" (auto runs {}: {})",
                        ciuic::AlgoName(rt->rt->engine().AlgoFor(std::min(n, std::max<size_t>(c.bucket_bytes / 4, 1)))),
                        table->source);
    }
    if (key.size() + 1 > cap)
      throw ciuic::UsageError(fmt::format("configuration '{}' needs {} bytes, {} given", key, key.size() + 1, cap));
    std::memcpy(buf, key.c_str(), key.size() + 1);
  });
}

ciuic_status_t ciuic_runtime_nonfinite(ciuic_runtime_t* rt, uint64_t* count) {
  return Guard([&] {
    auto& a = AsyncOf(rt, "ciuic_runtime_nonfinite");
    Require(count, "count");
    a.Call([&](ciuic::RuleRuntime& r) { *count = r.nonfinite(); });
  });
}

#if CIUIC_HAVE_MPI
ciuic_status_t ciuic_mpi_init(int* provided) {
  return Guard([&] {
    int inited = 0, finalized = 0, level = MPI_THREAD_SINGLE;
    MPI_Finalized(&finalized);
    if (finalized) throw ciuic::RuntimeError("MPI was already finalized in this process");
    MPI_Initialized(&inited);
    if (!inited) {
      // MULTIPLE: a framework may reduce from a thread other than the one that initialised MPI.
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &level) != MPI_SUCCESS)
        throw ciuic::RuntimeError("MPI_Init_thread failed");
      g_mpi_ours = true;
    } else {
      MPI_Query_thread(&level);
    }
    if (provided) *provided = level;
  });
}

ciuic_status_t ciuic_mpi_finalize(void) {
  return Guard([&] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (g_mpi_ours && !finalized) MPI_Finalize();
    g_mpi_ours = false;
  });
}
#else
ciuic_status_t ciuic_mpi_init(int*) {
  return Guard([] { throw ciuic::UsageError("this build has no MPI"); });
}
ciuic_status_t ciuic_mpi_finalize(void) {
  return Guard([] { throw ciuic::UsageError("this build has no MPI"); });
}
#endif

// ---- codecs ---------------------------------------------------------------------------------------

ciuic_status_t ciuic_codec_create(const char* spec, ciuic_codec_t** out) {
  return Guard([&] {
    Require(spec, "spec");
    Require(out, "out");
    *out = new ciuic_codec{ciuic::Codec(ciuic::ParseCodec(spec))};
  });
}

void ciuic_codec_destroy(ciuic_codec_t* codec) { delete codec; }

ciuic_status_t ciuic_codec_name(const ciuic_codec_t* codec, char* buf, size_t cap) {
  return Guard([&] {
    Require(codec, "codec");
    Require(buf, "buf");
    const std::string name = codec->codec.Name();
    if (name.size() + 1 > cap)
      throw ciuic::UsageError(fmt::format("codec name '{}' needs {} bytes, {} given", name, name.size() + 1, cap));
    std::memcpy(buf, name.c_str(), name.size() + 1);
  });
}

ciuic_status_t ciuic_codec_flags(const ciuic_codec_t* codec, uint32_t* flags) {
  return Guard([&] {
    Require(codec, "codec");
    Require(flags, "flags");
    const ciuic::Codec& c = codec->codec;
    const auto bit = [](bool on, int flag) { return on ? static_cast<uint32_t>(flag) : 0u; };
    *flags = bit(ciuic::CodecIsLossless(c.spec().kind), CIUIC_CODEC_LOSSLESS) |
             bit(c.Summable(), CIUIC_CODEC_SUMMABLE) | bit(c.Stateful(), CIUIC_CODEC_STATEFUL) |
             bit(c.HasDecodeAddEncode(), CIUIC_CODEC_DECODE_ADD_ENCODE);
  });
}

ciuic_status_t ciuic_codec_wire_bytes(const ciuic_codec_t* codec, size_t n, size_t* bytes) {
  return Guard([&] {
    Require(codec, "codec");
    Require(bytes, "bytes");
    *bytes = codec->codec.WireBytes(n);
  });
}

ciuic_status_t ciuic_codec_chunk(const ciuic_codec_t* codec, size_t n, int parts, int index, size_t* begin,
                                 size_t* end) {
  return Guard([&] {
    Require(codec, "codec");
    Require(begin, "begin");
    Require(end, "end");
    if (parts < 1 || index < 0 || index >= parts)
      throw ciuic::UsageError(fmt::format("chunk {} of {}: expected 0 <= index < parts", index, parts));
    const ciuic::hops::Range r = ciuic::hops::ChunkOf(n, parts, index, ChunkAlign(codec->codec));
    *begin = r.begin;
    *end = r.end;
  });
}

ciuic_status_t ciuic_codec_state_create(const ciuic_codec_t* codec, size_t n, ciuic_codec_state_t** out) {
  return Guard([&] {
    Require(codec, "codec");
    Require(out, "out");
    codec->codec.WireBytes(n);  // refuses counts the codec cannot address (topk's int32 indices)
    *out = new ciuic_codec_state{codec->codec, n, {}};
  });
}

void ciuic_codec_state_destroy(ciuic_codec_state_t* state) { delete state; }

ciuic_status_t ciuic_codec_state_info(const ciuic_codec_state_t* state, size_t* n, uint64_t* step) {
  return Guard([&] {
    Require(state, "state");
    if (n) *n = state->n;
    if (step) *step = state->st.step;
  });
}

ciuic_status_t ciuic_codec_state_residual(const ciuic_codec_state_t* state, float* out, size_t n) {
  return Guard([&] {
    Require(state, "state");
    if (n != state->n) throw ciuic::UsageError(fmt::format("the codec state holds {} elements, not {}", state->n, n));
    if (n) Require(out, "out");
    const ciuic::Buffer& r = state->st.residual;
    if (r.bytes() >= n * 4 && n) {
      ciuic::CopyBytes(out, ciuic::MemoryKind::kHost, r.data(), r.kind(), n * 4);
    } else if (n) {
      std::fill(out, out + n, 0.0f);
    }
  });
}

ciuic_status_t ciuic_codec_state_set_residual(ciuic_codec_state_t* state, const float* in, size_t n) {
  return Guard([&] {
    Require(state, "state");
    if (n != state->n) throw ciuic::UsageError(fmt::format("the codec state holds {} elements, not {}", state->n, n));
    if (n) Require(in, "in");
    if (ciuic::CodecStateShape(state->codec, n).residual == 0)
      throw ciuic::UsageError(fmt::format("codec {} keeps no residual", state->codec.Name()));
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite(in[i]))
        throw ciuic::InputError(fmt::format("residual[{}] is {}: it must be finite", i, in[i]));
    ciuic::Buffer b(n * 4, ciuic::MemoryKind::kHost);
    std::memcpy(b.data(), in, n * 4);
    state->st.residual = std::move(b);
    state->st.count = n;
  });
}

ciuic_status_t ciuic_codec_state_save(const ciuic_codec_state_t* state, void* buf, size_t cap, size_t* size) {
  return Guard([&] {
    Require(state, "state");
    Require(size, "size");
    const std::vector<uint8_t> bytes = ciuic::SaveCodecStateBytes(state->codec, state->n, state->st);
    *size = bytes.size();
    if (!buf) return;
    if (cap < bytes.size())
      throw ciuic::UsageError(fmt::format("the codec state needs {} bytes, {} given", bytes.size(), cap));
    std::memcpy(buf, bytes.data(), bytes.size());
  });
}

ciuic_status_t ciuic_codec_state_load(ciuic_codec_state_t* state, const void* buf, size_t size) {
  return Guard([&] {
    Require(state, "state");
    if (size) Require(buf, "buf");
    state->st = ciuic::LoadCodecStateBytes(state->codec, state->n, buf, size);
  });
}

ciuic_status_t ciuic_codec_encode(const ciuic_codec_t* codec, ciuic_codec_state_t* state, const float* in, size_t n,
                                  void* wire, size_t wire_bytes, uint64_t* step) {
  return Guard([&] {
    Require(codec, "codec");
    CheckState(codec, state, n);
    CheckWire(codec, n, wire_bytes, "wire");
    if (n) {
      Require(in, "in");
      Require(wire, "wire");
    }
    if (step) *step = state ? state->st.step : 0;
    codec->codec.Encode(in, n, wire, state ? &state->st : nullptr);
  });
}

ciuic_status_t ciuic_codec_encode_chunks(const ciuic_codec_t* codec, ciuic_codec_state_t* state, const float* in,
                                         size_t n, int parts, void* wire, size_t wire_bytes, uint64_t* step) {
  return Guard([&] {
    Require(codec, "codec");
    const ciuic::Codec& c = codec->codec;
    if (parts < 1) throw ciuic::UsageError(fmt::format("parts {} must be at least 1", parts));
    if (parts > 1 && !c.HasDecodeAddEncode())
      throw ciuic::UsageError(fmt::format("codec {} encodes a tensor whole (no per-chunk encode)", c.Name()));
    CheckState(codec, state, n);
    std::vector<ciuic::hops::Range> chunks;
    size_t total = 0;
    for (int i = 0; i < parts; ++i) {
      chunks.push_back(ciuic::hops::ChunkOf(n, parts, i, ChunkAlign(c)));
      total += c.WireBytes(chunks.back().size());
    }
    if (wire_bytes != total)
      throw ciuic::UsageError(fmt::format("wire: {} bytes given, codec {} encodes {} elements in {} chunks in {}",
                                          wire_bytes, c.Name(), n, parts, total));
    if (n) {
      Require(in, "in");
      Require(wire, "wire");
    }
    if (step) *step = state ? state->st.step : 0;
    if (parts == 1) {
      c.Encode(in, n, wire, state ? &state->st : nullptr);
      return;
    }
    // The worker side of sign2 (collectives/algorithms/sign2.cc): one step, the residual sliced.
    ciuic::CodecState local;
    ciuic::CodecState& st = state ? state->st : local;
    c.Prepare(st, n, ciuic::MemoryKind::kHost);
    float* residual = state && st.residual.bytes() ? st.residual.as<float>() : nullptr;
    const ciuic::QuantArgs a = c.Args(st.step++);
    auto* w = static_cast<uint8_t*>(wire);
    size_t off = 0;
    for (const ciuic::hops::Range& ch : chunks) {
      ciuic::QuantEncode(a, in + ch.begin, residual ? residual + ch.begin : nullptr, ch.size(), w + off,
                         st.flag.as<uint32_t>(), nullptr);
      off += c.WireBytes(ch.size());
    }
    c.CheckFlag(st);
  });
}

ciuic_status_t ciuic_codec_decode(const ciuic_codec_t* codec, const void* wire, size_t wire_bytes, size_t n,
                                  uint64_t step, float* out) {
  return Guard([&] {
    Require(codec, "codec");
    CheckWire(codec, n, wire_bytes, "wire");
    if (n) {
      Require(wire, "wire");
      Require(out, "out");
    }
    codec->codec.Decode(wire, n, out, step);
  });
}

ciuic_status_t ciuic_codec_decode_accumulate(const ciuic_codec_t* codec, const void* wire, size_t wire_bytes, size_t n,
                                             uint64_t step, float* acc) {
  return Guard([&] {
    Require(codec, "codec");
    CheckWire(codec, n, wire_bytes, "wire");
    if (n) {
      Require(wire, "wire");
      Require(acc, "acc");
    }
    codec->codec.DecodeAccumulate(wire, n, acc, step);
  });
}

ciuic_status_t ciuic_codec_decode_add_encode(const ciuic_codec_t* codec, const void* wire_in, const float* local,
                                             size_t n, uint64_t step, void* wire_out, size_t wire_bytes) {
  return Guard([&] {
    Require(codec, "codec");
    CheckWire(codec, n, wire_bytes, "wire_out");
    if (n) {
      Require(wire_in, "wire_in");
      Require(local, "local");
      Require(wire_out, "wire_out");
    }
    codec->codec.DecodeAddEncode(wire_in, local, n, wire_out, step);
  });
}

// ---- profiles -------------------------------------------------------------------------------------

ciuic_status_t ciuic_profile_load(const char* path, ciuic_profile_t** out) {
  return Guard([&] {
    Require(path, "path");
    Require(out, "out");
    *out = new ciuic_profile{ciuic::LoadProfile(path)};
  });
}

ciuic_status_t ciuic_profile_parse(const char* json, const char* origin, ciuic_profile_t** out) {
  return Guard([&] {
    Require(json, "json");
    Require(out, "out");
    *out = new ciuic_profile{ciuic::ParseProfile(json, origin ? origin : "<profile text>")};
  });
}

void ciuic_profile_destroy(ciuic_profile_t* profile) { delete profile; }

ciuic_status_t ciuic_profile_info(const ciuic_profile_t* profile, int* nodes, int* ranks, size_t* rules) {
  return Guard([&] {
    Require(profile, "profile");
    if (nodes) *nodes = profile->profile.nodes;
    if (ranks) *ranks = profile->profile.ranks;
    if (rules) *rules = profile->profile.rules.size();
  });
}

ciuic_status_t ciuic_profile_rule_at(const ciuic_profile_t* profile, size_t index, ciuic_rule_t* out) {
  return Guard([&] {
    Require(profile, "profile");
    Require(out, "out");
    if (index >= profile->profile.rules.size())
      throw ciuic::UsageError(fmt::format("rule {} of a profile with {} rules", index, profile->profile.rules.size()));
    FillRule(profile->profile.rules[index], out);
  });
}

ciuic_status_t ciuic_profile_rule_for(const ciuic_profile_t* profile, const char* op, uint64_t bytes,
                                      ciuic_rule_t* out) {
  return Guard([&] {
    Require(profile, "profile");
    Require(out, "out");
    FillRule(profile->profile.RuleFor(bytes, op ? op : "allreduce"), out);
  });
}

}  // extern "C"

// ---- Training kernels ------------------------------------------------------------------------------
namespace {

ciuic::Activation ActOf(ciuic_activation_t a) {
  switch (a) {
    case CIUIC_ACT_NONE:
      return ciuic::Activation::kNone;
    case CIUIC_ACT_RELU:
      return ciuic::Activation::kRelu;
    case CIUIC_ACT_GELU_TANH:
      return ciuic::Activation::kGeluTanh;
    case CIUIC_ACT_GELU_ERF:
      return ciuic::Activation::kGeluErf;
  }
  throw ciuic::UsageError(
      fmt::format("activation {}: expected CIUIC_ACT_NONE, _RELU, _GELU_TANH or _GELU_ERF", static_cast<int>(a)));
}

ciuic::DropoutArgs DropoutOf(float p, uint64_t seed, uint64_t offset) {
  if (!(p >= 0.0f && p <= 1.0f)) throw ciuic::UsageError(fmt::format("dropout p {} must be in [0, 1]", p));
  return {p, seed, offset};
}

void RequireAll(size_t rows, size_t cols, std::initializer_list<std::pair<const void*, const char*>> ptrs) {
  if (rows == 0 || cols == 0) return;
  for (const auto& [p, what] : ptrs) Require(p, what);
}

void CheckEps(float eps) {
  if (!(eps > 0.0f) || !std::isfinite(eps)) throw ciuic::UsageError(fmt::format("eps {} must be positive", eps));
}

// Every buffer of one call where the first lives: host memory, or device memory (the kernels pick the
// side by x or dy alone, and a mixed set would fault on either side).
void SameMemory(std::initializer_list<std::pair<const void*, const char*>> ptrs) {
  const void* first = nullptr;
  const char* first_name = nullptr;
  bool device = false;
  for (const auto& [p, what] : ptrs) {
    if (!p) continue;
    const bool here = ciuic::IsDevicePointer(p);
    if (!first) {
      first = p;
      first_name = what;
      device = here;
    } else if (here != device) {
      throw ciuic::UsageError(fmt::format("{} is {} memory but {} is {}: pass all host or all device buffers", what,
                                          here ? "device" : "host", first_name, device ? "device" : "host"));
    }
  }
}

// The backward kernels' column-gradient workspace, only when a column gradient is asked for, where the
// tensors live. A device one is freed only after the stream has drained (Finish, checked: a kernel fault
// is this call's error); so a device backward with column gradients synchronises its stream.
class Workspace {
 public:
  Workspace(bool needed, const void* where, size_t rows, size_t cols, void* stream)
      : device_(needed && ciuic::IsDevicePointer(where)), stream_(stream) {
    const ciuic::MemoryKind kind = device_ ? ciuic::MemoryKind::kDevice : ciuic::MemoryKind::kHost;
    if (needed) buffer_ = ciuic::Buffer(std::max<size_t>(ciuic::TrainWorkspaceBytes(rows, cols, kind), 4), kind);
  }
  ~Workspace() {
#if CIUIC_HAVE_CUDA
    if (device_ && !finished_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));  // after an exception
#endif
  }
  float* data() { return static_cast<float*>(buffer_.data()); }
  void Finish() {
    finished_ = true;
#if CIUIC_HAVE_CUDA
    if (device_) CIUIC_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
#endif
  }

 private:
  bool device_;
  [[maybe_unused]] void* stream_;  // used by the CUDA build's syncs
  bool finished_ = false;
  ciuic::Buffer buffer_;
};

}  // namespace

ciuic_status_t ciuic_ln_act_dropout_forward(ciuic_dtype_t dtype, size_t rows, size_t cols, ciuic_activation_t act,
                                            float p, uint64_t seed, uint64_t offset, const void* x, const float* gamma,
                                            const float* beta, float eps, void* y, float* mean, float* rstd,
                                            void* stream) {
  return Guard([&] {
    CheckEps(eps);
    RequireAll(rows, cols, {{x, "x"}, {gamma, "gamma"}, {beta, "beta"}, {y, "y"}, {mean, "mean"}, {rstd, "rstd"}});
    SameMemory({{x, "x"}, {gamma, "gamma"}, {beta, "beta"}, {y, "y"}, {mean, "mean"}, {rstd, "rstd"}});
    ciuic::LnActDropoutForward(DTypeOf(dtype), rows, cols, ActOf(act), DropoutOf(p, seed, offset), x, gamma, beta, eps,
                               y, mean, rstd, stream);
  });
}

ciuic_status_t ciuic_ln_act_dropout_backward(ciuic_dtype_t dtype, size_t rows, size_t cols, ciuic_activation_t act,
                                             float p, uint64_t seed, uint64_t offset, const void* dy, const void* x,
                                             const float* gamma, const float* beta, const float* mean,
                                             const float* rstd, void* dx, float* dgamma, float* dbeta, void* stream) {
  return Guard([&] {
    RequireAll(rows, cols,
               {{dy, "dy"}, {x, "x"}, {gamma, "gamma"}, {beta, "beta"}, {mean, "mean"}, {rstd, "rstd"}, {dx, "dx"}});
    SameMemory({{dy, "dy"},
                {x, "x"},
                {gamma, "gamma"},
                {beta, "beta"},
                {mean, "mean"},
                {rstd, "rstd"},
                {dx, "dx"},
                {dgamma, "dgamma"},
                {dbeta, "dbeta"}});
    Workspace ws(dgamma || dbeta, dy, rows, cols, stream);
    ciuic::LnActDropoutBackward(DTypeOf(dtype), rows, cols, ActOf(act), DropoutOf(p, seed, offset), dy, x, gamma, beta,
                                mean, rstd, dx, dgamma, dbeta, ws.data(), stream);
    ws.Finish();
  });
}

ciuic_status_t ciuic_bias_act_forward(ciuic_dtype_t dtype, size_t rows, size_t cols, ciuic_activation_t act,
                                      const void* x, const float* bias, void* y, void* stream) {
  return Guard([&] {
    RequireAll(rows, cols, {{x, "x"}, {y, "y"}});
    SameMemory({{x, "x"}, {bias, "bias"}, {y, "y"}});
    ciuic::BiasActForward(DTypeOf(dtype), rows, cols, ActOf(act), x, bias, y, stream);
  });
}

ciuic_status_t ciuic_bias_act_backward(ciuic_dtype_t dtype, size_t rows, size_t cols, ciuic_activation_t act,
                                       const void* dy, const void* x, const float* bias, void* dx, float* dbias,
                                       void* stream) {
  return Guard([&] {
    RequireAll(rows, cols, {{dy, "dy"}, {x, "x"}, {dx, "dx"}});
    SameMemory({{dy, "dy"}, {x, "x"}, {bias, "bias"}, {dx, "dx"}, {dbias, "dbias"}});
    Workspace ws(dbias != nullptr, dy, rows, cols, stream);
    ciuic::BiasActBackward(DTypeOf(dtype), rows, cols, ActOf(act), dy, x, bias, dx, dbias, ws.data(), stream);
    ws.Finish();
  });
}

ciuic_status_t ciuic_add_layer_norm_forward(ciuic_dtype_t dtype, size_t rows, size_t cols, const void* x,
                                            const void* residual, const float* gamma, const float* beta, float eps,
                                            void* sum, void* y, float* mean, float* rstd, void* stream) {
  return Guard([&] {
    CheckEps(eps);
    RequireAll(rows, cols,
               {{x, "x"},
                {residual, "residual"},
                {gamma, "gamma"},
                {beta, "beta"},
                {sum, "sum"},
                {y, "y"},
                {mean, "mean"},
                {rstd, "rstd"}});
    SameMemory({{x, "x"},
                {residual, "residual"},
                {gamma, "gamma"},
                {beta, "beta"},
                {sum, "sum"},
                {y, "y"},
                {mean, "mean"},
                {rstd, "rstd"}});
    ciuic::AddLayerNormForward(DTypeOf(dtype), rows, cols, x, residual, gamma, beta, eps, sum, y, mean, rstd, stream);
  });
}

ciuic_status_t ciuic_add_layer_norm_backward(ciuic_dtype_t dtype, size_t rows, size_t cols, const void* dy,
                                             const void* dsum, const void* sum, const float* gamma, const float* mean,
                                             const float* rstd, void* dx, float* dgamma, float* dbeta, void* stream) {
  return Guard([&] {
    RequireAll(rows, cols, {{dy, "dy"}, {sum, "sum"}, {gamma, "gamma"}, {mean, "mean"}, {rstd, "rstd"}, {dx, "dx"}});
    SameMemory({{dy, "dy"},
                {dsum, "dsum"},
                {sum, "sum"},
                {gamma, "gamma"},
                {mean, "mean"},
                {rstd, "rstd"},
                {dx, "dx"},
                {dgamma, "dgamma"},
                {dbeta, "dbeta"}});
    Workspace ws(dgamma || dbeta, dy, rows, cols, stream);
    ciuic::AddLayerNormBackward(DTypeOf(dtype), rows, cols, dy, dsum, sum, gamma, mean, rstd, dx, dgamma, dbeta,
                                ws.data(), stream);
    ws.Finish();
  });
}

ciuic_status_t ciuic_dropout_mask(size_t n, float p, uint64_t seed, uint64_t offset, uint8_t* keep) {
  return Guard([&] {
    if (n > 0) Require(keep, "keep");
    ciuic::DropoutMask(DropoutOf(p, seed, offset), n, keep);
  });
}
