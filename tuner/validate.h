#pragma once
// `ciuic-tune validate`: the local cost model (local_model.h) against measurement on this machine.
// Every (ranks, codec, size) is timed by ciuic-bench (`--backend ciuic`, MPI ranks, in-place, median of
// its iterations, then the median over `repeat` interleaved passes) and predicted from the stored
// calibration; both sides, the error of each row and the median |error| are printed and stored
// (`validations`). The model's primitives are timed in the passes themselves (before each pass one
// sweep of the validated codecs' kernels and one of the ring step per rank count; the medians stored
// as a calibration) unless `stored_kernels` (then what is missing is calibrated first): the inputs
// and the allreduces they predict see the same machine (on this VM whole minutes ran 1.5× slower than
// others, which a calibration made minutes earlier carries into every prediction).
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace ciuic {

struct ValidateOptions {
  std::vector<int> ranks = {2, 3, 4};
  std::vector<uint64_t> sizes;
  std::vector<std::string> codecs;
  int repeat = 3;
  int iters = 10;
  std::string kernel_sizes = "64K:64M:x4";  // the kernels' sizes (timed in the passes, or when missing)
  std::string link_sizes = "4K:64M:x2";     // ring-step sizes timed in the passes
  bool stored_kernels = false;              // predict from the stored kernels and link (calibrated when missing)
  std::string db;
};

struct ValidationRow {
  int ranks = 0;
  std::string codec, algo;
  double bytes = 0, measured_us = 0, predicted_us = 0;
  double error() const { return predicted_us / measured_us - 1; }
};

struct ValidationResult {
  std::vector<ValidationRow> rows;
  double median_abs_error = 0;
};

// UsageError for empty lists and ranks or repeats out of range (RunValidation checks first too).
void CheckValidateOptions(const ValidateOptions& o);
ValidationResult RunValidation(const ValidateOptions& o, std::ostream& out);
double MedianAbsError(const std::vector<ValidationRow>& rows);

}  // namespace ciuic
