/* The C API over an MPI the caller initialised itself (run under mpiexec with 2 and 3 ranks): a C
 * program calls MPI_Init, takes ciuic_mpi_world, and allreduces exact integers over the ring and
 * over MPI's own allreduce in fp32 (exact), and in bf16 and fp16 (ciuic's user-defined MPI types; the
 * 1/P pre-scaling rounds, so within 2 P^2 max|x| u, u the format's unit roundoff: a wrong sum is off
 * by at least 1). Then it finalises MPI itself. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>

#include "collectives/ciuic.h"
#include "tests/c/check.h"

#define N 4099

static float input(int i, int r) { return (float)((i * 7 + r * 13) % 17 - 8); }

/* unit_roundoff 0: every element exact. */
static void allreduce_check(ciuic_comm_t* comm, const char* algo, double unit_roundoff) {
  const int rank = ciuic_comm_rank(comm), size = ciuic_comm_size(comm);
  ciuic_runtime_t* rt = NULL;
  if (ciuic_runtime_create(comm, algo, "none", 0, &rt) != CIUIC_OK) {
    CHECK(0, "rank %d %s: create: %s", rank, algo, ciuic_last_error());
    return;
  }
  static float data[N];
  for (int i = 0; i < N; ++i) data[i] = input(i, rank);
  CHECK(ciuic_allreduce(rt, data, N, 1, 0) == CIUIC_OK, "rank %d %s: allreduce: %s", rank, algo, ciuic_last_error());
  int bad = 0;
  const double tol = 2.0 * size * size * 8.0 * unit_roundoff;
  for (int i = 0; i < N; ++i) {
    float want = 0;
    for (int q = 0; q < size; ++q) want += input(i, q);
    if (!(fabs((double)data[i] - want) <= tol)) {
      if (!bad) CHECK(0, "rank %d %s element %d: %g != %g", rank, algo, i, data[i], want);
      ++bad;
    }
  }
  ciuic_runtime_destroy(rt);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ciuic_comm_t* comm = NULL;
  if (ciuic_mpi_world(&comm) != CIUIC_OK) {
    fprintf(stderr, "ciuic_mpi_world: %s\n", ciuic_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(ciuic_comm_rank(comm) == rank && ciuic_comm_size(comm) == size, "rank %d/%d vs %d/%d", ciuic_comm_rank(comm),
        ciuic_comm_size(comm), rank, size);
  allreduce_check(comm, "ring", 0);
  allreduce_check(comm, "rd", 0);
  allreduce_check(comm, "native", 0);
  allreduce_check(comm, "native:bf16", ldexp(1.0, -8));
  allreduce_check(comm, "native:fp16", ldexp(1.0, -11));
  ciuic_comm_destroy(comm);
  /* The caller's MPI is still usable after ciuic is done with it. */
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("c_mpi_test: %d ranks, %d failure(s)\n", size, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
