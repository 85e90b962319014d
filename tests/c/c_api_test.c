/* The C API used from C alone: four thread ranks allreduce exact integers (codec none) and an int8
 * bucket (identical bits on every rank, within the stated bound), bad arguments return statuses with
 * messages, save/load round-trips and a state file of another world size is refused. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "collectives/ciuic.h"
#include "tests/c/check.h"

#define N 1000
#define RANKS 4

static float results[RANKS][N];
static const char* state_path = "ciuic_c_api_state.bin";

static void exact(ciuic_comm_t* comm, void* arg) {
  (void)arg;
  const int r = ciuic_comm_rank(comm);
  ciuic_runtime_t* rt = NULL;
  CHECK(ciuic_runtime_create(comm, "ring", "none", 0, &rt) == CIUIC_OK, "create: %s", ciuic_last_error());
  float data[N];
  for (int i = 0; i < N; ++i) data[i] = (float)((i * 7 + r * 13) % 101 - 50);
  CHECK(ciuic_allreduce(rt, data, N, 1, 0) == CIUIC_OK, "allreduce: %s", ciuic_last_error());
  for (int i = 0; i < N; ++i) {
    float want = 0;
    for (int q = 0; q < RANKS; ++q) want += (float)((i * 7 + q * 13) % 101 - 50);
    if (data[i] != want) {
      CHECK(0, "rank %d element %d: %f != %f", r, i, data[i], want);
      break;
    }
  }
  ciuic_runtime_destroy(rt);
}

static void lossy(ciuic_comm_t* comm, void* arg) {
  (void)arg;
  const int r = ciuic_comm_rank(comm);
  ciuic_runtime_t* rt = NULL;
  CHECK(ciuic_runtime_create(comm, "auto", "int8", 4096, &rt) == CIUIC_OK, "create: %s", ciuic_last_error());
  for (int i = 0; i < N; ++i) results[r][i] = sinf((float)(i + r));
  CHECK(ciuic_allreduce(rt, results[r], N, 7, 1) == CIUIC_OK, "allreduce: %s", ciuic_last_error());
  double wire = 0, raw = 0;
  CHECK(ciuic_runtime_counters(rt, &wire, &raw) == CIUIC_OK, "counters");
  CHECK(raw == N * 4.0 && wire > 0 && wire < raw, "counters: wire %f raw %f", wire, raw);
  if (r == 0) CHECK(ciuic_runtime_save(rt, state_path) == CIUIC_OK, "save: %s", ciuic_last_error());
  ciuic_runtime_destroy(rt);
}

static void wrong_world(ciuic_comm_t* comm, void* arg) {
  (void)arg;
  ciuic_runtime_t* rt = NULL;
  CHECK(ciuic_runtime_create(comm, "auto", "int8", 4096, &rt) == CIUIC_OK, "create");
  CHECK(ciuic_runtime_load(rt, state_path) == CIUIC_ERR_INPUT, "a 4-rank state loaded into 2 ranks");
  CHECK(strstr(ciuic_last_error(), "ranks") != NULL, "message: %s", ciuic_last_error());
  ciuic_runtime_destroy(rt);
}

static void bad_args(ciuic_comm_t* comm, void* arg) {
  (void)arg;
  ciuic_runtime_t* rt = NULL;
  CHECK(ciuic_runtime_create(comm, "ring", "int9", 0, &rt) == CIUIC_ERR_USAGE, "bad codec accepted");
  CHECK(strlen(ciuic_last_error()) > 0, "no message");
  CHECK(ciuic_runtime_create(comm, "tree", "none", 0, &rt) == CIUIC_ERR_USAGE, "bad algo accepted");
  CHECK(ciuic_allreduce(NULL, NULL, 1, 0, 0) == CIUIC_ERR_USAGE, "null runtime accepted");
  CHECK(ciuic_runtime_create(comm, "ring", "none", 0, &rt) == CIUIC_OK, "create");
  CHECK(ciuic_runtime_set_timeout(rt, -1) == CIUIC_ERR_USAGE, "negative timeout accepted");
  CHECK(ciuic_runtime_set_timeout(rt, NAN) == CIUIC_ERR_USAGE, "NaN timeout accepted");
  CHECK(ciuic_runtime_set_timeout(NULL, 5) == CIUIC_ERR_USAGE, "null runtime accepted");
  CHECK(ciuic_runtime_set_timeout(rt, 5) == CIUIC_OK, "timeout 5: %s", ciuic_last_error());
  float bad[4] = {1, 2, NAN, 4};
  CHECK(ciuic_allreduce(rt, bad, 4, 3, 0) == CIUIC_ERR_INPUT, "NaN accepted");
  ciuic_runtime_destroy(rt);
}

int main(void) {
  CHECK(ciuic_local_run(RANKS, exact, NULL) == CIUIC_OK, "exact: %s", ciuic_last_error());
  CHECK(ciuic_local_run(RANKS, lossy, NULL) == CIUIC_OK, "lossy: %s", ciuic_last_error());
  for (int q = 1; q < RANKS; ++q)
    CHECK(memcmp(results[q], results[0], sizeof results[0]) == 0, "rank %d bits differ from rank 0", q);
  for (int i = 0; i < N; ++i) {
    double want = 0;
    for (int q = 0; q < RANKS; ++q) want += sinf((float)(i + q));
    want /= RANKS;
    if (fabs(results[0][i] - want) > 0.05) {
      CHECK(0, "int8 mean off at %d: %f vs %f", i, results[0][i], want);
      break;
    }
  }
  CHECK(ciuic_local_run(2, wrong_world, NULL) == CIUIC_OK, "wrong_world: %s", ciuic_last_error());
  CHECK(ciuic_local_run(1, bad_args, NULL) == CIUIC_OK, "bad_args: %s", ciuic_last_error());
  CHECK(ciuic_local_run(0, bad_args, NULL) == CIUIC_ERR_USAGE, "0 ranks accepted");
  remove(state_path);
  if (failures) {
    fprintf(stderr, "c_api_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
