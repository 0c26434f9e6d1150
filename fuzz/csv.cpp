// The CSV reader (models/data/csv.hpp), raw or gzipped: the input's first
// byte chooses the options (task, label column, test fraction), the rest is
// the file.
//
// Properties: load_csv returns or throws DataError (nothing else, no
// crash); what it returns is a valid pair of splits (Dataset::validate)
// whose examples add up to the file's rows, with every feature and target
// a finite float (the file's numbers are finite; so must the tensors be).
#include <cmath>

#include "fuzz/fuzz_support.hpp"
#include "models/data/csv.hpp"
#include "models/data/error.hpp"

using namespace troupe::data;

namespace {

void check_finite(const troupe::kernels::Tensor& t, const char* what) {
  if (t.dtype() != troupe::kernels::DType::f32) return;
  const float* p = t.f32();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    TROUPE_FUZZ_CHECK(std::isfinite(p[i]), std::string("a ") + what + " that is not a finite float");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static troupe::fuzz::MemFile file;
  troupe::fuzz::Input in(data, size);
  const std::uint8_t choice = in.byte();
  CsvOptions options;
  options.task = choice & 1 ? Task::regression : Task::classification;
  if (choice & 2) options.label_column = "y";
  options.num_classes = choice & 4 ? 3 : 0;
  options.test_fraction = (choice >> 3 & 3) * 0.25;  // 0, 0.25, 0.5, 0.75
  options.seed = choice >> 5;
  const std::string_view text = in.rest();
  Splits splits;
  try {
    splits = load_csv(file.write(text.data(), text.size()), options);
  } catch (const DataError&) {
    return 0;
  }
  for (const Dataset* d : {&splits.train, &splits.test}) {
    try {
      d->validate();
    } catch (const DataError& e) {
      troupe::fuzz::fail(std::string("load_csv returned an invalid split: ") + e.what());
    }
    check_finite(d->features, "feature");
    if (options.task == Task::regression) check_finite(d->labels, "target");
  }
  return 0;
}
