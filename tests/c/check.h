/* CHECK(cond, fmt, ...) for the C tests: prints the message and counts a failure instead of stopping,
 * so one run reports every broken check; main returns failures != 0. */
#ifndef CIUIC_TESTS_C_CHECK_H_
#define CIUIC_TESTS_C_CHECK_H_

#include <stdio.h>

static int failures = 0;

#define CHECK(cond, ...)            \
  do {                              \
    if (!(cond)) {                  \
      fprintf(stderr, __VA_ARGS__); \
      fprintf(stderr, "\n");        \
      ++failures;                   \
    }                               \
  } while (0)

#endif /* CIUIC_TESTS_C_CHECK_H_ */
