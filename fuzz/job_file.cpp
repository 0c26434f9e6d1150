// The job file reader (job/job_file.hpp): the input is a job file's text.
//
// Properties: parse_job_text returns or throws JobFileError (nothing else:
// no std::out_of_range from a number, no crash); a job it accepts has a
// canonical text (to_job_text, which the job's fingerprint hashes) that
// to_job_text writes without throwing, that parse_job_text accepts, and
// that reads back to the same job (every field the text holds, floats bit
// for bit) and to the same text.
#include <cstring>
#include <stdexcept>

#include "fuzz/fuzz_support.hpp"
#include "job/job_file.hpp"

using namespace troupe::actors;

namespace {

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Every field to_job_text writes (tensorboard and elastic_batch are the
// coordinator's own and are not in the job text: job_file.hpp).
std::string difference(const JobConfig& a, const JobConfig& b) {
  const auto &s = a.train, &t = b.train;
  if (s.model != t.model) return "model";
  if (s.data != t.data) return "data";
  if (s.epochs != t.epochs) return "epochs";
  if (s.batch != t.batch) return "batch";
  if (s.max_steps != t.max_steps) return "steps";
  if (!same_float(s.lr, t.lr)) return "lr";
  if (s.schedule != t.schedule) return "schedule";
  if (s.warmup_steps != t.warmup_steps) return "warmup";
  if (s.seed != t.seed) return "seed";
  if (!same_float(s.label_smoothing, t.label_smoothing)) return "label_smoothing";
  if (s.augment != t.augment) return "augment";
  if (a.mode.str() != b.mode.str()) return "mode";
  if (a.switches.size() != b.switches.size()) return "switch";
  for (std::size_t i = 0; i < a.switches.size(); ++i)
    if (a.switches[i].step != b.switches[i].step || a.switches[i].mode.str() != b.switches[i].mode.str())
      return "switch";
  if (a.prefetch != b.prefetch) return "prefetch";
  if (a.threads_per_device != b.threads_per_device) return "threads_per_device";
  if (s.checkpoint_dir != t.checkpoint_dir) return "checkpoint_dir";
  if (s.checkpoint_every != t.checkpoint_every) return "checkpoint_every";
  if (std::memcmp(&s.checkpoint_minutes, &t.checkpoint_minutes, sizeof(double)) != 0) return "checkpoint_minutes";
  if (s.keep_last != t.keep_last) return "keep";
  if (s.eval_batch != t.eval_batch) return "eval_batch";
  if (s.eval_every != t.eval_every) return "eval_every";
  const auto &o = s.optimizer, &p = t.optimizer;
  if (o.name != p.name) return "optimizer.name";
  if (!same_float(o.momentum, p.momentum)) return "optimizer.momentum";
  if (o.nesterov != p.nesterov) return "optimizer.nesterov";
  if (!same_float(o.weight_decay, p.weight_decay)) return "optimizer.weight_decay";
  if (!same_float(o.epsilon, p.epsilon)) return "optimizer.epsilon";
  if (!same_float(o.beta1, p.beta1)) return "optimizer.beta1";
  if (!same_float(o.beta2, p.beta2)) return "optimizer.beta2";
  return {};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  JobConfig job;
  try {
    job = parse_job_text(text, "fuzz.toml");
  } catch (const JobFileError&) {
    return 0;
  }
  std::string canonical;
  try {
    canonical = to_job_text(job);
  } catch (const std::exception& e) {
    troupe::fuzz::fail(std::string("to_job_text throws for a job parse_job_text accepted: ") + e.what());
  }
  JobConfig back;
  try {
    back = parse_job_text(canonical, "canonical.toml");
  } catch (const JobFileError& e) {
    troupe::fuzz::fail(std::string("parse_job_text refuses the canonical text of a job it accepted: ") + e.what() +
                       "\n--- canonical text ---\n" + canonical);
  }
  const std::string field = difference(job, back);
  TROUPE_FUZZ_CHECK(field.empty(), "the canonical text reads back to another job: " + field);
  TROUPE_FUZZ_CHECK(to_job_text(back) == canonical, "the canonical text is not canonical");
  return 0;
}
