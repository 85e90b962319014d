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

/* Enums a caller passes in are ints: in C++ every int is then a value of the type (a C caller may
 * pass any, and each function refuses one it does not know with CIUIC_ERR_USAGE). */
#ifdef __cplusplus
#define CIUIC_ENUM_INT : int
#else
#define CIUIC_ENUM_INT
#endif

typedef enum {
  CIUIC_OK = 0,
  CIUIC_ERR_USAGE = 1,   /* bad argument: unknown codec or algorithm, null pointer, mismatched sizes */
  CIUIC_ERR_RUNTIME = 2, /* a transport or device failure */
  CIUIC_ERR_INPUT = 3    /* bad data: NaN/Inf in a gradient, a state file of another world size */
} ciuic_status_t;

typedef struct ciuic_comm ciuic_comm_t;
struct ciuic_profile;
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

/* Collective: every rank of comm creates its runtime with the same arguments.
 * algo: "auto" "ring" "rd" "hier" "sparse" "sign2" "powersgd", or "native" (the transport's own
 * allreduce; "native:bf16" / "native:fp16" reduce in 16 bits); codec: "none" "int8" "topk:0.01" ...
 * bucket_bytes 0 = 25 MiB. With $CIUIC_TRACE set (a file name), the runtime starts traced as if
 * ciuic_runtime_set_trace(rt, $CIUIC_TRACE) had been called.
 * "auto" with codec "none" chooses native, rd, ring or hier per bucket size from a crossover table,
 * $CIUIC_CROSSOVER: unset, the newest crossover the data folder's calibration database
 * ($CIUIC_DATA_DIR/ciuic.db, `ciuic-tune calibrate --ranks N`) holds for this CPU model, transport
 * and world size, else the built-in table; "db" the same, but nothing stored is CIUIC_ERR_INPUT;
 * "db:PATH" that database (required); "builtin"; any other value a crossover file
 * (`ciuic-bench --crossover-out`). The ranks agree on the table: a rank that cannot read its source,
 * or ranks that read different tables, fail every rank with CIUIC_ERR_INPUT naming them. */
ciuic_status_t ciuic_runtime_create(ciuic_comm_t* comm, const char* algo, const char* codec, size_t bucket_bytes,
                                    ciuic_runtime_t** out);
/* With a trace set, destroy first writes it (ciuic_runtime_trace_flush): collective then, so every
 * rank destroys its runtime. */
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
/* Traces: from now on this rank records the runtime's phases (per call and bucket: the finite check,
 * the ranks' agreement, encode, send, recv (which includes waiting for the peer), reduce,
 * decode-add-encode, decode, the halves of ring/rd/hier; on a GPU with CUPTI also every kernel, memcpy
 * and memset, each linked to the phase that launched it). Every rank calls it with the same path;
 * rank 0 writes one Chrome trace-event JSON file there (one track per rank; open it in
 * https://ui.perfetto.dev or chrome://tracing) at ciuic_runtime_trace_flush and on destroy, and prints
 * a few lines on stderr: per rank, the share of time in kernels, communication and waiting. The file
 * is replaced atomically. path null or "": recording stops (after writing what was recorded). A path
 * that cannot be written: CIUIC_ERR_INPUT. Recording costs nothing while no trace is set. */
ciuic_status_t ciuic_runtime_set_trace(ciuic_runtime_t* rt, const char* path);
/* Collective: every rank's events so far to rank 0, which writes the trace file; recording goes on
 * (a later flush rewrites the file with everything). Nothing without a trace. */
ciuic_status_t ciuic_runtime_trace_flush(ciuic_runtime_t* rt);
/* MPI_Init_thread (MPI_THREAD_MULTIPLE asked) unless MPI is already initialised, for callers with no
 * MPI binding of their own (Python under mpiexec); *provided (may be null) gets the thread level MPI
 * granted. ciuic_mpi_finalize finalises an MPI that ciuic_mpi_init initialised (else does nothing);
 * call it after the last ciuic call. CIUIC_ERR_USAGE in builds without MPI. */
ciuic_status_t ciuic_mpi_init(int* provided);
ciuic_status_t ciuic_mpi_finalize(void);

/* ---- Jobs not started by mpiexec (torchrun, a torch.distributed store) ---------------------------
 * The store the job's ranks already share: set(user, key, value, size) and get(user, key, buf, cap,
 * &size) return 0 on success (value is never null, also when size is 0); get blocks until the key
 * exists (or the store's own timeout: non-zero),
 * sets *size to the value's whole size and copies at most cap bytes (a longer value is read again). */
typedef int (*ciuic_store_set_fn)(void* user, const char* key, const void* value, size_t size);
typedef int (*ciuic_store_get_fn)(void* user, const char* key, void* buf, size_t cap, size_t* size);
/* Collective over the job's `size` ranks: a communicator whose ranks meet through the store under
 * `prefix` (one prefix per communicator in that store). device "cpu": gloo over TCP for host buffers;
 * "cuda": NCCL on the current device for device buffers, its unique id passed through the store (the
 * control plane stays on gloo); "cuda-gloo": device buffers over gloo, each message staged through
 * host memory (processes sharing one GPU, which NCCL refuses, or no NCCL). The callbacks are called during this call,
 * and again only when a hierarchical algorithm first splits the world (from the runtime's thread). timeout_s bounds
 * gloo's rendezvous and every gloo call (0: none). Destroy with ciuic_comm_destroy. */
ciuic_status_t ciuic_comm_create_store(int rank, int size, const char* prefix, const char* device,
                                       ciuic_store_set_fn set, ciuic_store_get_fn get, void* user, double timeout_s,
                                       ciuic_comm_t** out);
/* "cpu" or "cuda": the memory this communicator's buffers live in. */
const char* ciuic_comm_device(const ciuic_comm_t* comm);

/* ---- The runtime from a tuned profile, asynchronous ------------------------------------------
 * Created from a profile, the runtime picks each message's rule (algorithm, codec, precision,
 * bucket bytes, streams) by the message's byte size, as `ciuic-bench --backend ciuic --profile`
 * does, and runs on a thread of its own: ciuic_allreduce_async returns at once. Messages may be
 * fp32, fp16 or bf16; a 16-bit message is sent at its own width where its rule is lossless. */
typedef enum CIUIC_ENUM_INT { CIUIC_FP32 = 0, CIUIC_FP16 = 1, CIUIC_BF16 = 2 } ciuic_dtype_t;
enum {
  /* NaN/Inf in a bucket on any rank: summed uncompressed so every rank sees it (as DDP's default
   * hook would), the codec state left as it was; without: every rank fails with CIUIC_ERR_INPUT. */
  CIUIC_RUNTIME_PROPAGATE_NONFINITE = 1,
  /* Skip the check that the job's world (ranks, nodes, cpu/gpu) is the one the profile was tuned for. */
  CIUIC_RUNTIME_ANY_WORLD = 2
};
typedef struct ciuic_request ciuic_request_t;
typedef void (*ciuic_done_fn)(void* user, ciuic_status_t status, const char* error);

/* Collective. A profile tuned for another world (rank count, node count, cpu against gpu) is
 * CIUIC_ERR_USAGE naming both, unless flags hold CIUIC_RUNTIME_ANY_WORLD. ranks_per_node: the hier
 * algorithm's node size (0: by host name). The profile may be destroyed afterwards. */
ciuic_status_t ciuic_runtime_create_profile(ciuic_comm_t* comm, const struct ciuic_profile* profile, uint32_t flags,
                                            int ranks_per_node, ciuic_runtime_t** out);
/* Queues the allreduce of data[0, n) (sum; average != 0: mean) in place and returns. Collective:
 * every rank queues the same tensors in the same order. Device buffers: the reduction starts after
 * the work queued so far on `stream` (null: the legacy default stream), without a host wait. done
 * (may be null) is called on the runtime's thread when the reduction ended (its buffer final, the
 * request done); it may call the runtime's other functions but not destroy it. *out (may be null) gets
 * a request for test/wait, freed with ciuic_request_destroy. Works on every runtime; one made by
 * ciuic_runtime_create runs it at once (as ciuic_allreduce) and only fp32. */
ciuic_status_t ciuic_allreduce_async(ciuic_runtime_t* rt, void* data, size_t n, ciuic_dtype_t dtype, uint64_t tensor_id,
                                     int average, void* stream, ciuic_done_fn done, void* user, ciuic_request_t** out);
ciuic_status_t ciuic_request_test(const ciuic_request_t* req, int* done);
/* Blocks until the reduction ended; returns its status (message: ciuic_last_error). */
ciuic_status_t ciuic_request_wait(const ciuic_request_t* req);
/* Device buffers: `stream`'s later work waits for the reduction (the host waits only until the
 * runtime's thread has enqueued it); host buffers: as ciuic_request_wait. */
ciuic_status_t ciuic_request_stream_wait(const ciuic_request_t* req, void* stream);
void ciuic_request_destroy(ciuic_request_t* req);

/* Error feedback of tensor_id reduced as (n, dtype): n fp32 values (zeros where none yet). set
 * replaces it (finite values), *kept (may be null) = 0 when that tensor's codec keeps no residual.
 * forget drops every state of the id. With these a caller moves error feedback between tensor ids
 * (DDP's bucket rebuild). They wait for the work queued before them. */
ciuic_status_t ciuic_runtime_residual(ciuic_runtime_t* rt, uint64_t tensor_id, size_t n, ciuic_dtype_t dtype,
                                      float* out);
ciuic_status_t ciuic_runtime_set_residual(ciuic_runtime_t* rt, uint64_t tensor_id, size_t n, ciuic_dtype_t dtype,
                                          const float* values, int* kept);
ciuic_status_t ciuic_runtime_forget(ciuic_runtime_t* rt, uint64_t tensor_id);
/* The configuration a message would run ("ring int8 fp32 4194304 B x4") into buf[0, cap). A runtime
 * from ciuic_runtime_create (fp32 only) with algo "auto" also names what auto runs for the message's
 * first bucket and where its table came from ("auto none fp32 ... (auto runs ring: built-in (mpi))"). */
ciuic_status_t ciuic_runtime_config_of(ciuic_runtime_t* rt, size_t n, ciuic_dtype_t dtype, char* buf, size_t cap);
/* Buckets that met NaN/Inf and were summed uncompressed (CIUIC_RUNTIME_PROPAGATE_NONFINITE). */
ciuic_status_t ciuic_runtime_nonfinite(ciuic_runtime_t* rt, uint64_t* count);

/* ---- Codecs: the runtime's compressors one call at a time, for hooks that exchange the bytes over
 * a transport of their own (PyTorch DDP communication hooks over gloo). Buffers are host memory (or
 * all device memory of the current GPU in CUDA builds), fp32 elements. */
typedef struct ciuic_codec ciuic_codec_t;
typedef struct ciuic_codec_state ciuic_codec_state_t;

enum {
  CIUIC_CODEC_LOSSLESS = 1,         /* none: fp32 as is */
  CIUIC_CODEC_SUMMABLE = 2,         /* payloads of several ranks add as they are (fp16, bf16, randomk's values) */
  CIUIC_CODEC_STATEFUL = 4,         /* encode keeps per-tensor state: error feedback, PowerSGD's Q, a step */
  CIUIC_CODEC_DECODE_ADD_ENCODE = 8 /* the fused reduce-scatter hop exists; encode_chunks takes parts > 1 */
};

/* spec: what the runtime's --codec accepts ("none" "fp16" "bf16" "fp8e4m3" "fp8e5m2" "int8" "int4"
 * "sign1" "topk:RATIO" "randomk:RATIO" "powersgd:RANK"), with error feedback on. */
ciuic_status_t ciuic_codec_create(const char* spec, ciuic_codec_t** out);
void ciuic_codec_destroy(ciuic_codec_t* codec);
/* The canonical spelling (parses back to the same codec) into buf[0, cap), NUL-terminated;
 * CIUIC_ERR_USAGE when it does not fit. */
ciuic_status_t ciuic_codec_name(const ciuic_codec_t* codec, char* buf, size_t cap);
ciuic_status_t ciuic_codec_flags(const ciuic_codec_t* codec, uint32_t* flags);
/* Exact bytes of one encoded tensor of n elements. */
ciuic_status_t ciuic_codec_wire_bytes(const ciuic_codec_t* codec, size_t n, size_t* bytes);
/* Elements [*begin, *end) of chunk `index` of `parts`, the boundaries on the codec's scale block as
 * the runtime's ring and two-phase algorithms cut a bucket. */
ciuic_status_t ciuic_codec_chunk(const ciuic_codec_t* codec, size_t n, int parts, int index, size_t* begin,
                                 size_t* end);

/* One tensor's codec state (error-feedback residual, PowerSGD Q, step) for n elements of this codec;
 * encode calls take it with the same codec and n only. */
ciuic_status_t ciuic_codec_state_create(const ciuic_codec_t* codec, size_t n, ciuic_codec_state_t** out);
void ciuic_codec_state_destroy(ciuic_codec_state_t* state);
/* Elements it was made for and its step (encodes so far). */
ciuic_status_t ciuic_codec_state_info(const ciuic_codec_state_t* state, size_t* n, uint64_t* step);
/* The residual into out[0, n) (zeros before the first encode, or for a codec without one); n must be
 * the state's. set_residual replaces it (finite values only), e.g. to carry error feedback over to
 * a state of another bucket layout; the step and Q stay. */
ciuic_status_t ciuic_codec_state_residual(const ciuic_codec_state_t* state, float* out, size_t n);
ciuic_status_t ciuic_codec_state_set_residual(ciuic_codec_state_t* state, const float* in, size_t n);
/* The state as bytes (format 1: magic "CIUICCST", u32 version, u32 zero, u64 codec-name length +
 * name, u64 count, u64 step, then residual and Q, each a u64 float count + the floats; native byte
 * order). buf null or cap too small: only *size is set and CIUIC_OK / CIUIC_ERR_USAGE returned. */
ciuic_status_t ciuic_codec_state_save(const ciuic_codec_state_t* state, void* buf, size_t cap, size_t* size);
/* Replaces the state with saved bytes. Every length is held to the bytes left and to this state's
 * codec and n before anything is allocated, values must be finite, nothing may follow; otherwise
 * CIUIC_ERR_INPUT naming the field, and the state is unchanged. */
ciuic_status_t ciuic_codec_state_load(ciuic_codec_state_t* state, const void* buf, size_t size);

/* wire[0, wire_bytes) = encode(in[0, n)), wire_bytes = ciuic_codec_wire_bytes(n). With a state: error
 * feedback through it and its step advanced; *step (may be null) gets the step the wire was encoded
 * at (decode needs it for randomk). Without (null): no error feedback, step 0. NaN/Inf in the input
 * (plus residual): CIUIC_ERR_INPUT after the wire was written (the affected blocks decode to NaN). */
ciuic_status_t ciuic_codec_encode(const ciuic_codec_t* codec, ciuic_codec_state_t* state, const float* in, size_t n,
                                  void* wire, size_t wire_bytes, uint64_t* step);
/* Chunk i of `parts` (ciuic_codec_chunk) encoded on its own into the wire after chunks 0..i-1, all at
 * one step with the state's residual over the whole tensor: the worker side of the two-phase
 * algorithm. wire_bytes = the sum of the chunks' wire bytes. parts > 1 needs
 * CIUIC_CODEC_DECODE_ADD_ENCODE. */
ciuic_status_t ciuic_codec_encode_chunks(const ciuic_codec_t* codec, ciuic_codec_state_t* state, const float* in,
                                         size_t n, int parts, void* wire, size_t wire_bytes, uint64_t* step);
/* out[0, n) = decode(wire); decode_accumulate adds instead. step: the encode's step. */
ciuic_status_t ciuic_codec_decode(const ciuic_codec_t* codec, const void* wire, size_t wire_bytes, size_t n,
                                  uint64_t step, float* out);
ciuic_status_t ciuic_codec_decode_accumulate(const ciuic_codec_t* codec, const void* wire, size_t wire_bytes, size_t n,
                                             uint64_t step, float* acc);
/* wire_out = encode(decode(wire_in) + local[0, n)) in one pass, no error feedback (the ring's hop). */
ciuic_status_t ciuic_codec_decode_add_encode(const ciuic_codec_t* codec, const void* wire_in, const float* local,
                                             size_t n, uint64_t step, void* wire_out, size_t wire_bytes);

/* ---- Profiles (ciuic.profile/1, as ciuic-tune writes them): the rule for a message size. */
typedef struct ciuic_profile ciuic_profile_t;

typedef struct {
  char op[16];                   /* "allreduce" */
  char algo[16];                 /* ring rd hier sparse sign2 powersgd nccl */
  char codec[48];                /* canonical spelling, as ciuic_codec_name */
  char precision[8];             /* fp32 bf16 fp16 (not fp32: algo nccl, codec none) */
  char gate[8];                  /* passed failed n/a */
  uint64_t min_bytes, max_bytes; /* the band [min, max); max 0: no upper bound */
  uint64_t bucket_bytes;
  int32_t streams, hierarchy_depth;
  double predicted_us, measured_us; /* measured -1: not measured */
} ciuic_rule_t;

/* A profile file, or its JSON text (origin names it in messages; may be null). Unknown schema
 * versions, keys and values: CIUIC_ERR_INPUT naming the JSON path. */
ciuic_status_t ciuic_profile_load(const char* path, ciuic_profile_t** out);
ciuic_status_t ciuic_profile_parse(const char* json, const char* origin, ciuic_profile_t** out);
void ciuic_profile_destroy(ciuic_profile_t* profile);
/* The nodes and ranks of the topology it was tuned for, and its rule count. */
ciuic_status_t ciuic_profile_info(const ciuic_profile_t* profile, int* nodes, int* ranks, size_t* rules);
ciuic_status_t ciuic_profile_rule_at(const ciuic_profile_t* profile, size_t index, ciuic_rule_t* out);
/* The rule whose band holds `bytes` for op (null: "allreduce"); CIUIC_ERR_INPUT when none does. */
ciuic_status_t ciuic_profile_rule_for(const ciuic_profile_t* profile, const char* op, uint64_t bytes,
                                      ciuic_rule_t* out);

/* ---- Training kernels (kernels/train_kernels.h): fused LayerNorm + activation + dropout, bias +
 * activation, residual add + LayerNorm, forward and backward. Tensors are row-major rows x cols
 * (tokens x hidden) in `dtype`; gamma, beta, bias, their gradients, mean and rstd are fp32 (one per
 * column, resp. per row). Buffers all host memory, or all memory of the current CUDA device; stream
 * is a cudaStream_t (null: the default stream); a mix of host and device buffers is CIUIC_ERR_USAGE. A
 * backward asked for column gradients (dgamma/dbeta, dbias) allocates their workspace inside and, on the
 * GPU, waits for its stream before returning (a kernel fault is then its error); without them it only
 * enqueues. In place is allowed (dx = dy, y = x). Dropout keeps element e (= row * cols + col) by the
 * Philox stream keyed by (seed, offset); p = 0: no dropout. */
typedef enum CIUIC_ENUM_INT {
  CIUIC_ACT_NONE = 0,
  CIUIC_ACT_RELU = 1,
  CIUIC_ACT_GELU_TANH = 2, /* PyTorch's gelu(approximate="tanh") */
  CIUIC_ACT_GELU_ERF = 3   /* PyTorch's gelu() */
} ciuic_activation_t;

/* y = dropout(act(layer_norm(x))). */
ciuic_status_t ciuic_ln_act_dropout_forward(ciuic_dtype_t dtype, size_t rows, size_t cols, ciuic_activation_t act,
                                            float p, uint64_t seed, uint64_t offset, const void* x, const float* gamma,
                                            const float* beta, float eps, void* y, float* mean, float* rstd,
                                            void* stream);
/* dgamma, dbeta: overwritten (not accumulated); may both be null. */
ciuic_status_t ciuic_ln_act_dropout_backward(ciuic_dtype_t dtype, size_t rows, size_t cols, ciuic_activation_t act,
                                             float p, uint64_t seed, uint64_t offset, const void* dy, const void* x,
                                             const float* gamma, const float* beta, const float* mean,
                                             const float* rstd, void* dx, float* dgamma, float* dbeta, void* stream);
/* y = act(x + bias) (bias null: act(x)). */
ciuic_status_t ciuic_bias_act_forward(ciuic_dtype_t dtype, size_t rows, size_t cols, ciuic_activation_t act,
                                      const void* x, const float* bias, void* y, void* stream);
/* dx = dy * act'(x + bias); dbias (may be null) = column sums of dx. */
ciuic_status_t ciuic_bias_act_backward(ciuic_dtype_t dtype, size_t rows, size_t cols, ciuic_activation_t act,
                                       const void* dy, const void* x, const float* bias, void* dx, float* dbias,
                                       void* stream);
/* sum = x + residual (in dtype); y = layer_norm(sum). */
ciuic_status_t ciuic_add_layer_norm_forward(ciuic_dtype_t dtype, size_t rows, size_t cols, const void* x,
                                            const void* residual, const float* gamma, const float* beta, float eps,
                                            void* sum, void* y, float* mean, float* rstd, void* stream);
/* dx (the gradient of x and of residual) = layer_norm's input gradient + dsum (may be null). */
ciuic_status_t ciuic_add_layer_norm_backward(ciuic_dtype_t dtype, size_t rows, size_t cols, const void* dy,
                                             const void* dsum, const void* sum, const float* gamma, const float* mean,
                                             const float* rstd, void* dx, float* dgamma, float* dbeta, void* stream);
/* keep[e] = 1 where dropout keeps element e of [0, n), else 0 (host memory). */
ciuic_status_t ciuic_dropout_mask(size_t n, float p, uint64_t seed, uint64_t offset, uint8_t* keep);

#ifdef __cplusplus
}
#endif

#endif /* CIUIC_H_ */
