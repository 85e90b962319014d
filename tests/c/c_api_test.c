/* The C API used from C alone: four thread ranks allreduce exact integers (codec none) and an int8
 * bucket (identical bits on every rank, within the stated bound), "auto" runs the crossover
 * $CIUIC_CROSSOVER names (and an explicit database that holds none fails every rank), bad arguments
 * return statuses with messages, save/load round-trips and a state file of another world size is
 * refused. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

static const char* crossover_path = "ciuic_c_api_crossover.json";

/* auto under the table $CIUIC_CROSSOVER names: rd below 1 KiB, the ring above, each exact; with
 * arg, creating fails on every rank with that message. */
static void crossover(ciuic_comm_t* comm, void* arg) {
  const char* want_error = (const char*)arg;
  const int r = ciuic_comm_rank(comm);
  ciuic_runtime_t* rt = NULL;
  const ciuic_status_t s = ciuic_runtime_create(comm, "auto", "none", 0, &rt);
  if (want_error) {
    CHECK(s == CIUIC_ERR_INPUT && strstr(ciuic_last_error(), want_error), "rank %d: status %d, '%s', expected '%s'", r,
          (int)s, ciuic_last_error(), want_error);
    if (s == CIUIC_OK) ciuic_runtime_destroy(rt);
    return;
  }
  CHECK(s == CIUIC_OK, "create auto: %s", ciuic_last_error());
  if (s != CIUIC_OK) return;
  static const size_t sizes[2] = {64, N};
  static const char* runs[2] = {"(auto runs rd: file 'ciuic_c_api_crossover.json')",
                                "(auto runs ring: file 'ciuic_c_api_crossover.json')"};
  for (int k = 0; k < 2; ++k) {
    char config[512];
    CHECK(ciuic_runtime_config_of(rt, sizes[k], CIUIC_FP32, config, sizeof config) == CIUIC_OK, "config_of: %s",
          ciuic_last_error());
    CHECK(strstr(config, runs[k]) != NULL, "rank %d, %zu elements: '%s', expected '%s'", r, sizes[k], config, runs[k]);
    float data[N];
    for (size_t i = 0; i < sizes[k]; ++i) data[i] = (float)((i * 7 + (size_t)r * 13) % 101) - 50.0f;
    CHECK(ciuic_allreduce(rt, data, sizes[k], 7 + (uint64_t)k, 0) == CIUIC_OK, "allreduce: %s", ciuic_last_error());
    for (size_t i = 0; i < sizes[k]; ++i) {
      float want = 0;
      for (int q = 0; q < RANKS; ++q) want += (float)((i * 7 + (size_t)q * 13) % 101) - 50.0f;
      if (data[i] != want) {
        CHECK(0, "auto, rank %d element %zu: %f != %f", r, i, data[i], want);
        break;
      }
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
  FILE* table = fopen(crossover_path, "w");
  CHECK(table != NULL, "cannot write %s", crossover_path);
  if (table) {
    fputs(
        "{\"format\": \"ciuic-crossover\", \"version\": 1, \"ranks\": 4, \"transport\": \"local\", \"bands\": "
        "[{\"below_bytes\": 1024, \"algo\": \"rd\"}, {\"below_bytes\": null, \"algo\": \"ring\"}]}\n",
        table);
    fclose(table);
  }
  setenv("CIUIC_CROSSOVER", crossover_path, 1);
  CHECK(ciuic_local_run(RANKS, crossover, NULL) == CIUIC_OK, "crossover: %s", ciuic_last_error());
  setenv("CIUIC_CROSSOVER", "db:ciuic_c_api_no.db", 1);
  CHECK(ciuic_local_run(RANKS, crossover,
                        "$CIUIC_CROSSOVER=db:ciuic_c_api_no.db: 'ciuic_c_api_no.db' holds no crossover "
                        "for 4 ranks over local") == CIUIC_OK,
        "crossover db: %s", ciuic_last_error());
  unsetenv("CIUIC_CROSSOVER");
  remove(crossover_path);
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
