/* The C API a job not started by mpiexec uses, from C through libciuic.so: three threads meet through
 * an in-memory store (the two callbacks), make a runtime from a two-band profile of their own world,
 * and queue fp32 and bf16 allreduces that complete through callbacks and requests (exact sums,
 * identical on every rank, bf16 at half the wire bytes); a profile of another world, a CUDA
 * communicator where no GPU is usable, and bad arguments return statuses with messages. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ciuic.h"
#include "tests/c/check.h"

#define RANKS 3
#define N 6000 /* 24000 fp32 bytes: the ring band; 12000 bf16 bytes: the first band */

/* ---- an in-memory store: get waits for its key ---- */
#define MAX_KEYS 256
static struct {
  pthread_mutex_t m;
  pthread_cond_t cv;
  int count;
  char* keys[MAX_KEYS];
  char* values[MAX_KEYS];
  size_t sizes[MAX_KEYS];
} store = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {0}, {0}, {0}};

static int store_set(void* user, const char* key, const void* value, size_t size) {
  (void)user;
  pthread_mutex_lock(&store.m);
  if (store.count == MAX_KEYS) {
    pthread_mutex_unlock(&store.m);
    return 1;
  }
  store.keys[store.count] = strdup(key);
  store.values[store.count] = malloc(size ? size : 1);
  memcpy(store.values[store.count], value, size);
  store.sizes[store.count++] = size;
  pthread_cond_broadcast(&store.cv);
  pthread_mutex_unlock(&store.m);
  return 0;
}

static int store_get(void* user, const char* key, void* buf, size_t cap, size_t* size) {
  (void)user;
  pthread_mutex_lock(&store.m);
  for (;;) {
    for (int i = store.count - 1; i >= 0; --i) {
      if (strcmp(store.keys[i], key) == 0) {
        *size = store.sizes[i];
        memcpy(buf, store.values[i], store.sizes[i] < cap ? store.sizes[i] : cap);
        pthread_mutex_unlock(&store.m);
        return 0;
      }
    }
    pthread_cond_wait(&store.cv, &store.m);
  }
}

static int store_refuses(void* user, const char* key, const void* value, size_t size) {
  (void)user, (void)key, (void)value, (void)size;
  return 1;
}

static const char* profile_json(int ranks) {
  static _Thread_local char text[2048];  // one per rank-thread: the ranks parse at once
  snprintf(
      text, sizeof text,
      "{\"schema\": \"ciuic.profile/1\", \"topology\": {\"name\": \"cpu_local\", \"fingerprint\": \"0\", "
      "\"nodes\": 1, \"ranks\": %d, \"device\": \"cpu\"}, \"workload\": \"resnet50\", \"provenance\": "
      "{\"tool_version\": \"0.1.0\", \"git_commit\": \"0\", \"created\": \"2026-11-26T00:00:00Z\", \"study_id\": 1, "
      "\"mode\": \"model\", \"strategy\": \"random\", \"seed\": 1, \"budget\": 1}, \"step\": {\"predicted_us\": 1, "
      "\"baseline_us\": 1}, \"rules\": ["
      "{\"op\": \"allreduce\", \"min_bytes\": 0, \"max_bytes\": 16384, \"algo\": \"nccl\", \"codec\": \"none\", "
      "\"precision\": \"fp32\", \"bucket_bytes\": 4096, \"streams\": 1, \"hierarchy_depth\": 1, \"predicted_us\": 1, "
      "\"measured_us\": null, \"baseline_us\": null, \"gate\": \"n/a\"}, "
      "{\"op\": \"allreduce\", \"min_bytes\": 16384, \"max_bytes\": 0, \"algo\": \"ring\", \"codec\": \"none\", "
      "\"precision\": \"fp32\", \"bucket_bytes\": 8192, \"streams\": 2, \"hierarchy_depth\": 1, \"predicted_us\": 1, "
      "\"measured_us\": null, \"baseline_us\": null, \"gate\": \"n/a\"}]}",
      ranks);
  return text;
}

static uint16_t to_bf16(float x) { /* exact for the small integers used here */
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

static atomic_int callbacks;
static void done(void* user, ciuic_status_t status, const char* error) {
  (void)error;
  if (status == CIUIC_OK) atomic_fetch_add(&callbacks, 1);
  *(int*)user = (int)status + 100;
}

static float out32[RANKS][N];
static uint16_t out16[RANKS][N];
static char configs[RANKS][2][128];

static void* rank_main(void* arg) {
  const int r = (int)(intptr_t)arg;
  ciuic_comm_t* comm = NULL;
  CHECK(ciuic_comm_create_store(r, RANKS, "c-test/world", "cpu", store_set, store_get, NULL, 30, &comm) == CIUIC_OK,
        "rank %d create_store: %s", r, ciuic_last_error());
  if (!comm) return NULL;
  CHECK(strcmp(ciuic_comm_device(comm), "cpu") == 0 && ciuic_comm_rank(comm) == r && ciuic_comm_size(comm) == RANKS,
        "rank %d: the communicator is not rank %d of %d on cpu", r, r, RANKS);
  ciuic_profile_t* mine = NULL;
  ciuic_profile_t* other = NULL;
  CHECK(ciuic_profile_parse(profile_json(RANKS), "mine", &mine) == CIUIC_OK, "parse: %s", ciuic_last_error());
  CHECK(ciuic_profile_parse(profile_json(16), "other", &other) == CIUIC_OK, "parse: %s", ciuic_last_error());
  ciuic_runtime_t* rt = NULL;
  /* Another world: refused on every rank, naming both. */
  CHECK(ciuic_runtime_create_profile(comm, other, 0, 0, &rt) == CIUIC_ERR_USAGE &&
            strstr(ciuic_last_error(), "16 cpu ranks on 1 node") &&
            strstr(ciuic_last_error(), "this job has 3 cpu ranks"),
        "rank %d: a 16-rank profile: %s", r, ciuic_last_error());
  CHECK(ciuic_runtime_create_profile(comm, mine, 1u << 7, 0, &rt) == CIUIC_ERR_USAGE, "unknown flags accepted");
  CHECK(ciuic_runtime_create_profile(comm, mine, CIUIC_RUNTIME_PROPAGATE_NONFINITE, 0, &rt) == CIUIC_OK,
        "rank %d create_profile: %s", r, ciuic_last_error());
  ciuic_profile_destroy(other);
  ciuic_profile_destroy(mine); /* the runtime keeps its own copy */
  if (!rt) return NULL;
  CHECK(ciuic_runtime_config_of(rt, N, CIUIC_FP32, configs[r][0], sizeof configs[r][0]) == CIUIC_OK, "config_of");
  CHECK(ciuic_runtime_config_of(rt, N, CIUIC_BF16, configs[r][1], sizeof configs[r][1]) == CIUIC_OK, "config_of");
  for (int i = 0; i < N; ++i) {
    out32[r][i] = (float)((i * 7 + r * 13) % 101 - 50);
    out16[r][i] = to_bf16((float)((i * 3 + r * 5) % 31 - 15));
  }
  int status32 = 0, status16 = 0;
  ciuic_request_t* req = NULL;
  CHECK(ciuic_allreduce_async(rt, out32[r], N, CIUIC_FP32, 1, 0, NULL, done, &status32, &req) == CIUIC_OK,
        "async fp32: %s", ciuic_last_error());
  CHECK(ciuic_allreduce_async(rt, out16[r], N, CIUIC_BF16, 2, 0, NULL, done, &status16, NULL) == CIUIC_OK,
        "async bf16: %s", ciuic_last_error());
  CHECK(ciuic_request_wait(req) == CIUIC_OK, "wait: %s", ciuic_last_error());
  int finished = 0;
  CHECK(ciuic_request_test(req, &finished) == CIUIC_OK && finished == 1, "test after wait");
  ciuic_request_destroy(req);
  /* Calls that touch the runtime wait for the queue: the bf16 one has ended after this. */
  uint64_t nonfinite = 99;
  CHECK(ciuic_runtime_nonfinite(rt, &nonfinite) == CIUIC_OK && nonfinite == 0, "nonfinite %llu",
        (unsigned long long)nonfinite);
  CHECK(status32 == 100 && status16 == 100, "rank %d: callbacks reported %d and %d", r, status32 - 100, status16 - 100);
  /* Bad arguments: a status and a message, nothing queued. */
  CHECK(ciuic_allreduce_async(rt, out32[r], N, (ciuic_dtype_t)7, 3, 0, NULL, NULL, NULL, NULL) == CIUIC_ERR_USAGE &&
            strstr(ciuic_last_error(), "dtype 7"),
        "bad dtype: %s", ciuic_last_error());
  CHECK(ciuic_allreduce_async(rt, NULL, N, CIUIC_FP32, 3, 0, NULL, NULL, NULL, NULL) == CIUIC_ERR_USAGE, "null data");
  CHECK(ciuic_request_wait(NULL) == CIUIC_ERR_USAGE, "null request");
  CHECK(ciuic_runtime_set_residual(rt, 1, N, CIUIC_FP32, NULL, NULL) == CIUIC_ERR_USAGE, "null residual");
  ciuic_runtime_destroy(rt);
  ciuic_comm_destroy(comm);
  return NULL;
}

int main(void) {
  pthread_t threads[RANKS];
  for (int r = 0; r < RANKS; ++r) pthread_create(&threads[r], NULL, rank_main, (void*)(intptr_t)r);
  for (int r = 0; r < RANKS; ++r) pthread_join(threads[r], NULL);
  CHECK(atomic_load(&callbacks) == 2 * RANKS, "%d callbacks reported success, %d expected", atomic_load(&callbacks),
        2 * RANKS);
  for (int r = 0; r < RANKS; ++r) {
    CHECK(strcmp(configs[r][0], "ring none fp32 8192 B x2") == 0, "fp32 config: %s", configs[r][0]);
    /* 12000 bytes: the first band at its own width; gloo has no bf16 sum, so the ring with the bf16 wire. */
    CHECK(strcmp(configs[r][1], "ring bf16 fp32 4096 B x1 no-ef") == 0, "bf16 config: %s", configs[r][1]);
    for (int i = 0; i < N; ++i) {
      float want32 = 0, want16 = 0;
      for (int q = 0; q < RANKS; ++q) {
        want32 += (float)((i * 7 + q * 13) % 101 - 50);
        want16 += (float)((i * 3 + q * 5) % 31 - 15);
      }
      if (out32[r][i] != want32 || from_bf16(out16[r][i]) != want16) {
        CHECK(0, "rank %d element %d: %g %g, want %g %g", r, i, out32[r][i], from_bf16(out16[r][i]), want32, want16);
        break;
      }
    }
  }
  /* Bad arguments to the store communicator; CUDA where no GPU is usable: refused with the reason. */
  ciuic_comm_t* c = NULL;
  CHECK(ciuic_comm_create_store(0, 1, "x", "tpu", store_set, store_get, NULL, 1, &c) == CIUIC_ERR_USAGE &&
            strstr(ciuic_last_error(), "tpu"),
        "device tpu: %s", ciuic_last_error());
  CHECK(ciuic_comm_create_store(2, 2, "x", "cpu", store_set, store_get, NULL, 1, &c) == CIUIC_ERR_USAGE,
        "rank 2 of 2: %s", ciuic_last_error());
  CHECK(ciuic_comm_create_store(0, 1, "x", "cpu", NULL, store_get, NULL, 1, &c) == CIUIC_ERR_USAGE, "null set");
  CHECK(ciuic_comm_create_store(0, 1, "x", "cpu", store_set, store_get, NULL, -1, &c) == CIUIC_ERR_USAGE,
        "negative timeout");
  CHECK(ciuic_comm_create_store(0, 1, "y", "cpu", store_refuses, store_get, NULL, 1, &c) == CIUIC_ERR_RUNTIME &&
            strstr(ciuic_last_error(), "refused"),
        "a store that refuses: %s", ciuic_last_error());
  const ciuic_status_t s = ciuic_comm_create_store(0, 1, "z", "cuda", store_set, store_get, NULL, 5, &c);
  if (s == CIUIC_OK) {
    printf("cuda: a GPU is usable here; the CUDA communicator was made\n");
    ciuic_comm_destroy(c);
  } else {
    CHECK((s == CIUIC_ERR_USAGE && strstr(ciuic_last_error(), "without CUDA")) ||
              (s == CIUIC_ERR_RUNTIME && strstr(ciuic_last_error(), "CUDA device")),
          "cuda without a GPU: status %d, %s", (int)s, ciuic_last_error());
    printf("cuda refused: %s\n", ciuic_last_error());
  }
  const ciuic_status_t sg = ciuic_comm_create_store(0, 1, "w", "cuda-gloo", store_set, store_get, NULL, 5, &c);
  if (sg == CIUIC_OK) {
    printf("cuda-gloo: a GPU is usable here; the staging communicator was made\n");
    ciuic_comm_destroy(c);
  } else {
    CHECK((sg == CIUIC_ERR_USAGE && strstr(ciuic_last_error(), "without CUDA")) ||
              (sg == CIUIC_ERR_RUNTIME && strstr(ciuic_last_error(), "no CUDA device")),
          "cuda-gloo without a GPU: status %d, %s", (int)sg, ciuic_last_error());
    printf("cuda-gloo refused: %s\n", ciuic_last_error());
  }
  printf("c_store_api: %d failure(s)\n", failures);
  return failures != 0;
}
