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
// The TOML: the file is TOML 1.0, parsed with toml++ (Debian 12's
// libtomlplusplus-dev 3.3), so every TOML spelling works: basic and literal
// strings, multi-line ones, escapes; integers in any base, with `_`; floats
// (a float key also takes an integer; the range is checked on the 32-bit
// float kept, so 0.99999999999 is 1 for momentum's [0, 1)); true / false;
// comments; inline tables and dotted keys (`optimizer = { name = "sgd" }`,
// `optimizer.name = "sgd"`, `training.epochs = 2` are the two tables named below).
// The parsed document is then walked with the job's own key table:
//   - tables: keys at the top level, or in [training], are training keys;
//     [optimizer] holds name, momentum, nesterov, weight_decay, epsilon,
//     beta1, beta2. Any other table, array or date is refused.
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
// seed is in 0..2^64-1, as --seed. TOML integers (and toml++'s, int64) stop
// at 2^63-1, so a seed is an integer or a string of decimal digits
// (seed = "18446744073709551615"), and to_job_text writes a seed from 2^63
// on as such a string, a smaller one as an integer (so the canonical text,
// and the fingerprint, of such jobs is what the hand-written parser before
// toml++ wrote). An integer literal beyond int64 is toml++'s error, which
// for seed says to write the string.
// User documentation: docs/USER-GUIDE.md ("The job file").
//
// The file is read with util::read_config_file: a regular file of at most
// 1 MiB (util/config_file.hpp).
//
// Errors (JobFileError, a std::invalid_argument) read "FILE:LINE: key 'K':
// what is wrong": unknown keys and tables, wrong types, duplicates (with the
// first line), bad values (a mode, a switch schedule, a learning-rate
// schedule, an optimizer name, a count out of range). TOML syntax errors
// read "FILE:LINE:COLUMN: " and toml++'s description; a key or table TOML
// refuses as defined twice gets the job file's duplicate message instead,
// naming both lines.
#pragma once

#include <stdexcept>
#include <string>

#include "job/job.hpp"

namespace troupe::actors {

struct JobFileError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Parses job text; `source` names it in errors (a path, "job from host-a:7000").
actors::JobConfig parse_job_text(const std::string& text, const std::string& source);
// Reads and parses a file. Throws JobFileError (also when it cannot be read).
actors::JobConfig load_job_file(const std::string& path);

// Canonical job text: every key, in a fixed order, floats written so they
// read back to the same float, control characters in strings as escapes,
// a seed from 2^63 on as a string. parse_job_text(to_job_text(c)) gives c back
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
