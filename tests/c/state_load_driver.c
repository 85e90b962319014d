/* Test-only driver for tests/scripts/bad_inputs.sh: loads one error-feedback state file through the C
 * API the way a training script would, so bad state files can be judged like any other bad input.
 * Usage: state_load_driver ALGO CODEC BUCKET_BYTES FILE
 * A runtime of that shape is created on a 1-rank thread communicator and ciuic_runtime_load(FILE)
 * called. Refused: ciuic_last_error() as one line on stderr, exit 1 (CIUIC_ERR_INPUT or _USAGE) or 2
 * (CIUIC_ERR_RUNTIME: not the answer a bad file should get). A refused load must leave the runtime
 * usable: one allreduce follows, and its failure is a second line (which the caller counts as a
 * failure). Loaded: silent, exit 0. A bad command line of the driver itself: exit 64. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ciuic.h"

struct job {
  const char* algo;
  const char* codec;
  size_t bucket_bytes;
  const char* path;
  int code;
};

static void run(ciuic_comm_t* comm, void* arg) {
  struct job* j = (struct job*)arg;
  ciuic_runtime_t* rt = NULL;
  if (ciuic_runtime_create(comm, j->algo, j->codec, j->bucket_bytes, &rt) != CIUIC_OK) {
    fprintf(stderr, "state_load_driver: cannot create the runtime (%s %s %zu): %s\n", j->algo, j->codec,
            j->bucket_bytes, ciuic_last_error());
    j->code = 64;
    return;
  }
  const ciuic_status_t s = ciuic_runtime_load(rt, j->path);
  if (s == CIUIC_OK) {
    j->code = 0;
  } else {
    fprintf(stderr, "state_load_driver: %s\n", ciuic_last_error());
    j->code = s == CIUIC_ERR_RUNTIME ? 2 : 1;
    float g[64];
    for (int i = 0; i < 64; ++i) g[i] = (float)(i % 7) * 0.25f - 0.75f;
    if (ciuic_allreduce(rt, g, 64, 7, 0) != CIUIC_OK)
      fprintf(stderr, "state_load_driver: the runtime is unusable after the refused load: %s\n", ciuic_last_error());
  }
  ciuic_runtime_destroy(rt);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s ALGO CODEC BUCKET_BYTES FILE\n", argv[0]);
    return 64;
  }
  char* end = NULL;
  const unsigned long long bucket = strtoull(argv[3], &end, 10);
  if (!*argv[3] || *end) {
    fprintf(stderr, "state_load_driver: BUCKET_BYTES '%s' is not a number\n", argv[3]);
    return 64;
  }
  struct job j = {argv[1], argv[2], (size_t)bucket, argv[4], 64};
  if (ciuic_local_run(1, run, &j) != CIUIC_OK) {
    fprintf(stderr, "state_load_driver: %s\n", ciuic_last_error());
    return 2;
  }
  return j.code;
}
