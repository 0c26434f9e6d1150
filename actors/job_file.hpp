// The job file (JOB.toml): what `troupe train` takes, as the coordinator of
// `troupe node` reads it and sends it to every worker (to_job_text), and the
// fingerprint nodes compare before they train together.
//
//   # troupe job
//   model = "cnn"
//   data = "fashion-mnist"
//   epochs = 2
//   batch = 64                  # per replica
//   lr = 1e-3
//   mode = "sync"
//   switch = "500:async"
//
//   optimizer = "sgd"           # as --optimizer sgd
//   momentum = 0.9
//   nesterov = true
//
// or, the same, with the optimizer in a table:
//
//   [optimizer]
//   name = "sgd"
//   momentum = 0.9
//   nesterov = true
//
// The TOML subset:
//   - one `key = value` per line; bare keys (A-Z a-z 0-9 _ -); no dotted keys;
//   - values: "strings" with the escapes \" \\ \n \t (control characters
//     other than tab must be escaped, as in TOML); integers (decimal,
//     optional sign, `_` between digits); floats (1.5, -2e-3, 1E+4; a float
//     key also takes an integer; the range is checked on the 32-bit float
//     kept, so 0.99999999999 is 1 for momentum's [0, 1)); true / false. No
//     arrays, inline tables, single-quoted or multi-line strings, dates;
//   - `#` starts a comment outside strings; blank lines are ignored;
//   - tables: keys before any header, or under [training], are training keys;
//     [optimizer] holds name, momentum, nesterov, weight_decay, epsilon,
//     beta1, beta2. A header may appear once.
// Parsed here rather than with toml++ (Debian 12 has libtomlplusplus-dev
// 3.3): toml++ holds integers as int64, so it could not read back a seed in
// 2^63..2^64-1 that --seed takes and to_job_text writes, and the subset
// needs no more than this file.
// Training keys (one per flag of `troupe train`, '-' written '_'): model,
// data, epochs, batch, steps, lr, schedule, warmup, seed, mode, switch,
// prefetch, threads_per_device (or threads), ps_shards, ps_split_above, checkpoint_dir,
// checkpoint_every, keep, eval_batch, eval_every, and the optimizer flat:
// optimizer (the name), momentum, nesterov, weight_decay, epsilon, beta1,
// beta2. A setting given twice (momentum and [optimizer] momentum, threads
// and threads_per_device) is an error naming both lines, and so is a flat
// `optimizer = "..."` beside an [optimizer] table (TOML refuses a key and a
// table of one name). Every key is optional (the defaults of `troupe
// train`). Devices, the control endpoint, metrics, logging and --resume are
// not part of a job: each node names its own on its command line.
// seed is an integer in 0..2^64-1 (TOML integers stop at 2^63-1; the job
// file goes on to 2^64-1, as --seed does); anything else is refused.
// User documentation: docs/USER-GUIDE.md ("The job file").
//
// The file is read with util::read_config_file: a regular file of at most
// 1 MiB (util/config_file.hpp).
//
// Errors (JobFileError, a std::invalid_argument) read "FILE:LINE: key 'K':
// what is wrong": unknown keys and tables, wrong types, duplicates (with the
// first line), bad values (a mode, a switch schedule, a learning-rate
// schedule, an optimizer name, a count out of range).
#pragma once

#include <stdexcept>
#include <string>

#include "actors/job.hpp"

namespace troupe::actors {

struct JobFileError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Parses job text; `source` names it in errors (a path, "job from host-a:7000").
actors::JobConfig parse_job_text(const std::string& text, const std::string& source);
// Reads and parses a file. Throws JobFileError (also when it cannot be read).
actors::JobConfig load_job_file(const std::string& path);

// Canonical job text: every key, in a fixed order, floats written so they
// read back to the same float. parse_job_text(to_job_text(c)) gives c back
// (the fields a job file holds; devices, data options, resume and the
// timeout are the node's own and are not written).
std::string to_job_text(const actors::JobConfig& config);

// What two nodes compare before training together.
struct JobIdentity {
  std::string troupe_version;  // TROUPE_VERSION of the node
  std::string fingerprint;     // hex SHA-256 of the version and the canonical job text
};

JobIdentity job_identity(const actors::JobConfig& config);
JobIdentity job_identity(const actors::JobConfig& config, const std::string& troupe_version);

// Empty when `remote` (e.g. the coordinator's) and `local` agree; otherwise
// the reason to refuse, naming both versions or saying that the jobs differ.
std::string job_incompatibility(const JobIdentity& local, const JobIdentity& remote);

}  // namespace troupe::actors
