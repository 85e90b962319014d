/* ciuic C API: the bundled compressed-allreduce runtime behind opaque handles, for C and for other
 * languages through their C FFI (Python ctypes). Every call returns a status; ciuic_last_error()
 * gives the message of the last failing call on this thread. */
#ifndef CIUIC_H_
#define CIUIC_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  CIUIC_OK = 0,
  CIUIC_ERR_USAGE = 1,   /* bad argument: unknown codec or algorithm, null pointer, mismatched sizes */
  CIUIC_ERR_RUNTIME = 2, /* a transport or device failure */
  CIUIC_ERR_INPUT = 3    /* bad data: NaN/Inf in a gradient, a state file of another world size */
} ciuic_status_t;

typedef struct ciuic_comm ciuic_comm_t;
typedef struct ciuic_runtime ciuic_runtime_t;

const char* ciuic_status_string(ciuic_status_t status);
const char* ciuic_last_error(void);

/* Runs fn(comm, arg) on nranks threads, each with its rank's communicator (the thread backend). */
ciuic_status_t ciuic_local_run(int nranks, void (*fn)(ciuic_comm_t* comm, void* arg), void* arg);
/* MPI_COMM_WORLD of an MPI the caller initialised (CIUIC_ERR_USAGE in builds without MPI). */
ciuic_status_t ciuic_mpi_world(ciuic_comm_t** out);
void ciuic_comm_destroy(ciuic_comm_t* comm); /* only for communicators from ciuic_mpi_world */
int ciuic_comm_rank(const ciuic_comm_t* comm);
int ciuic_comm_size(const ciuic_comm_t* comm);

/* algo: "auto" "ring" "rd" "hier" "sparse" "sign2" "powersgd", or "native" (the transport's own
 * allreduce; "native:bf16" / "native:fp16" reduce in 16 bits); codec: "none" "int8" "topk:0.01" ...
 * bucket_bytes 0 = 25 MiB. */
ciuic_status_t ciuic_runtime_create(ciuic_comm_t* comm, const char* algo, const char* codec, size_t bucket_bytes,
                                    ciuic_runtime_t** out);
void ciuic_runtime_destroy(ciuic_runtime_t* rt);
/* Sum (average != 0: mean) of data[0, n) over all ranks, in place; tensor_id keys error feedback.
 * Collective: every rank makes the same calls in the same order. NaN/Inf on any rank, or a call or
 * codec state that differs from the other ranks', fails every rank together (CIUIC_ERR_INPUT, or
 * CIUIC_ERR_USAGE for differing calls) with a message naming the ranks; nothing is reduced. */
ciuic_status_t ciuic_allreduce(ciuic_runtime_t* rt, float* data, size_t n, uint64_t tensor_id, int average);
/* This rank's error-feedback state to its own file (written aside, then renamed into place). */
ciuic_status_t ciuic_runtime_save(ciuic_runtime_t* rt, const char* path);
/* Collective: each rank loads the file its own save wrote. Every length in the file is checked
 * against the file size and this runtime (world size, rank, codec, bucket size, the buffers the codec
 * keeps) before anything is allocated, and loaded values must be finite. Unless every rank read a good
 * file and all hold the same tensors, counts and steps, every rank returns CIUIC_ERR_INPUT naming the
 * failing ranks and no rank's state changes. A null path fails like an unreadable file. */
ciuic_status_t ciuic_runtime_load(ciuic_runtime_t* rt, const char* path);
/* Bytes this rank sent and fp32 bytes reduced so far. */
/* Seconds an allreduce or load may go without progress before the runtime prints one line naming
 * the stuck call (and, under mpiexec, the peer that went silent) and ends the process with exit 2;
 * 0 turns the deadline off. Default: $CIUIC_TIMEOUT or 60 s. Negative or NaN: CIUIC_ERR_USAGE. */
ciuic_status_t ciuic_runtime_set_timeout(ciuic_runtime_t* rt, double seconds);
ciuic_status_t ciuic_runtime_counters(const ciuic_runtime_t* rt, double* wire_bytes, double* raw_bytes);

#ifdef __cplusplus
}
#endif

#endif /* CIUIC_H_ */
