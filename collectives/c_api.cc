// The C API (ciuic.h) over ciuic::Runtime: exceptions become status codes and a per-thread message.
#include "collectives/ciuic.h"

#include <memory>
#include <string>

#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "core/config.h"
#include "core/error.h"
#if CIUIC_HAVE_MPI
#include "collectives/backends/mpi/communicator.h"
#endif

struct ciuic_comm {
  ciuic::Communicator* comm;
  std::unique_ptr<ciuic::Communicator> owned;
};
struct ciuic_runtime {
  std::unique_ptr<ciuic::Runtime> rt;
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

void Require(const void* p, const char* what) {
  if (!p) throw ciuic::UsageError(std::string(what) + " is null");
}

}  // namespace

extern "C" {

const char* ciuic_status_string(ciuic_status_t s) {
  switch (s) {
    case CIUIC_OK: return "ok";
    case CIUIC_ERR_USAGE: return "bad usage";
    case CIUIC_ERR_RUNTIME: return "runtime failure";
    case CIUIC_ERR_INPUT: return "bad input";
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
    auto rt = std::make_unique<ciuic_runtime>();
    rt->rt = std::make_unique<ciuic::Runtime>(*comm->comm, cfg);
    *out = rt.release();
  });
}

void ciuic_runtime_destroy(ciuic_runtime_t* rt) { delete rt; }

ciuic_status_t ciuic_allreduce(ciuic_runtime_t* rt, float* data, size_t n, uint64_t tensor_id, int average) {
  return Guard([&] {
    Require(rt, "runtime");
    if (n) Require(data, "data");
    rt->rt->AllReduce(data, n, tensor_id, average != 0);
  });
}

ciuic_status_t ciuic_runtime_save(ciuic_runtime_t* rt, const char* path) {
  return Guard([&] {
    Require(rt, "runtime");
    Require(path, "path");
    rt->rt->Save(path);
  });
}

ciuic_status_t ciuic_runtime_load(ciuic_runtime_t* rt, const char* path) {
  return Guard([&] {
    Require(rt, "runtime");
    // Load is collective: a rank without a path still takes part (and fails), so its peers fail
    // with it instead of waiting for it.
    rt->rt->Load(path ? path : "");
  });
}

ciuic_status_t ciuic_runtime_set_timeout(ciuic_runtime_t* rt, double seconds) {
  return Guard([&] {
    Require(rt, "runtime");
    rt->rt->SetTimeout(seconds);
  });
}

ciuic_status_t ciuic_runtime_counters(const ciuic_runtime_t* rt, double* wire_bytes, double* raw_bytes) {
  return Guard([&] {
    Require(rt, "runtime");
    if (wire_bytes) *wire_bytes = rt->rt->counters().wire_bytes;
    if (raw_bytes) *raw_bytes = rt->rt->counters().raw_bytes;
  });
}

}  // extern "C"
