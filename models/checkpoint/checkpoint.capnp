# The troupe checkpoint file: one unpacked Cap'n Proto message, root struct
# `Checkpoint`. Print one with (README.md in this folder):
#
#   capnp decode models/checkpoint/checkpoint.capnp Checkpoint < ckpt-000000001000.troupe
#
# Cap'n Proto 0.9.2 limits shape it (shared/DESIGN.md, "Wire and file
# formats"): a Data blob holds at most 2^29 - 1 bytes, so every float buffer is
# a `Buffer` of chunks of at most 16 MiB; readers set their traversal limit
# from the file size.
#
# Compatibility: fields are only ever added, with the next free ordinal, and
# never renumbered or retyped. An older reader ignores fields it does not know.
# A change an older reader would misread (a new meaning for an existing field)
# bumps `formatVersion`, and readers refuse versions newer than their own.

@0xb7ccdbf8d6ddd46a;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::checkpoint::schema");

const magicText :Text = "troupe.checkpoint";
# The value of Checkpoint.magic in every troupe checkpoint.

const currentFormatVersion :UInt32 = 1;
# The format version this schema describes.

struct Checkpoint {
  magic @0 :Text;
  # Always `magicText` ("troupe.checkpoint"): tells a troupe checkpoint from any
  # other file, including other Cap'n Proto messages.

  formatVersion @1 :UInt32;
  # The file layout's version (`currentFormatVersion` when written). A reader
  # refuses a file with a newer version than it knows.

  troupeVersion @2 :Text;
  # The troupe release that wrote the file, e.g. "0.1.0". Informational.

  writtenAtUnixMs @3 :Int64;
  # Wall-clock time of writing, milliseconds since 1970-01-01 UTC.

  model @4 :Model;
  # Which model the parameters belong to.

  parameters @5 :Buffer;
  # The model's flat parameter buffer (DESIGN.md, "One flat buffer per
  # model"); its elementCount equals model.parameterCount.

  optimizer @6 :Optimizer;
  # The optimizer's name, settings and state.

  position @7 :Position;
  # Where training stands: step, epoch, data cursor.

  schedule @8 :Schedule;
  # The learning-rate schedule and where it was last evaluated.

  rng @9 :Rng;
  # The trainer's random number generator state.

  updateMode @10 :Text;
  # How replicas combine updates: "sync", "async" or "ssp:N" (stale-synchronous
  # with staleness bound N).

  metricsNote @11 :Text;
  # Optional free text, e.g. "loss=0.231 accuracy=0.934"; empty when none.

  modelState @13 :Buffer;
  # What the model keeps that is not trained (BatchNorm's running mean and
  # variance), flat like the parameters (Model::state()); no elements when
  # the model keeps none, and in files written before it existed. Its
  # chunks carry their own CRCs; its name must be "model state".

  metadataCrc32 @12 :UInt32;
  # zlib crc32 over every field of format version 1 except chunk bytes and
  # chunk CRCs (those have their own), in a fixed encoding (metadata_crc32()
  # in checkpoint.cpp): a flipped bit in the step, the schedule or a name is
  # caught too. Fields added later need checks of their own.
}

struct Model {
  name @0 :Text;
  # The model zoo name, e.g. "mlp" or "cnn".

  spec @1 :Text;
  # The full model spec text, enough to rebuild the model without the user
  # naming it again.

  parameterCount @2 :UInt64;
  # Number of float32 parameters; equals parameters.elementCount.
}

struct Buffer {
  # A float32 tensor, flattened, stored as consecutive chunks.

  name @0 :Text;
  # What the buffer holds: "parameters", or an optimizer state name such as
  # "m", "v" or "velocity".

  elementCount @1 :UInt64;
  # Number of float32 elements. The chunks' byte sizes add up to
  # 4 * elementCount.

  chunks @2 :List(Chunk);
  # The elements in order. Every chunk but the last holds exactly 16 MiB
  # (4 Mi elements) in files written by troupe; readers accept any chunk
  # size that is a multiple of 4 bytes.
}

struct Chunk {
  data @0 :Data;
  # Raw IEEE-754 float32 elements, little-endian, at most 16 MiB.

  crc32 @1 :UInt32;
  # zlib crc32() of `data`, checked on every read.
}

struct Optimizer {
  name @0 :Text;
  # "sgd", "momentum", "adam", ...

  spec @1 :Text;
  # The optimizer spec text as the user gave it, e.g. "adam lr=0.001".

  hyperParameters @2 :List(Scalar);
  # Numeric settings by name, e.g. beta1 = 0.9, weightDecay = 0.0001.

  state @3 :List(Buffer);
  # Per-parameter state buffers by name ("m", "v", "velocity"), each usually
  # as long as the parameters.

  scalars @4 :List(Scalar);
  # Scalar state by name, e.g. "adam_step", "m_schedule".
}

struct Scalar {
  key @0 :Text;
  value @1 :Float64;
}

struct Position {
  globalStep @0 :UInt64;
  # Optimizer steps taken so far (the next step has this number).

  epoch @1 :UInt64;
  # Completed epochs.

  cursor @2 :DataCursor;
  # Where in the data the next batch comes from (replica 0's place in its
  # shard when several replicas trained).

  replicaClocks @3 :List(UInt64);
  # Steps each replica had completed, by global rank, when the file was
  # written by the actor runtime (empty from the single-replica trainer and
  # in older files). Replica r's data cursor is its clock: epoch =
  # clock / batchesPerEpoch, batch = clock % batchesPerEpoch. In sync mode all
  # are equal; in async and ssp they differ, and a resume must restore each
  # one, or replicas redo (or skip) batches.

  replicaClocksCrc32 @4 :UInt32;
  # zlib crc32 over replicaClocks (count, then each value, as 8 little-endian
  # bytes); added after format version 1, so it has its own check.

  segment @5 :Segment;
  # The data segment the replicas were training (elastic membership; written
  # by the actor runtime, absent -- world 0 -- in older files and from the
  # single-replica trainer). With it a resume continues each replica's data
  # exactly even after view changes, and on another number of replicas in
  # sync every example of the epoch is still used once.

  segmentCrc32 @6 :UInt32;
  # zlib crc32 over the segment's fields in their order (8 little-endian
  # bytes each; lossSum as its IEEE-754 bits); its own check, like
  # replicaClocksCrc32.
}

struct Segment {
  # models/data/epoch_plan.hpp, 5.: a segment starts at permutation position
  # `offset` of its epoch and splits the positions after it among `world`
  # replicas of `batch` examples each. Replica r's next batch is number
  # (replicaClocks[r] - startClock) of the segment.
  startClock @0 :UInt64;
  # The replicas' clock when the segment began.

  offset @1 :UInt64;
  # Permutation positions of the epoch used before the segment.

  world @2 :UInt32;
  # Replicas that train it (0: no segment recorded).

  batch @3 :UInt64;
  # Examples per replica and step.

  stepsBefore @4 :UInt64;
  # Steps (clock) of the epoch before this segment, for progress shown as
  # "step k/n of the epoch".

  epochExamples @5 :UInt64;
  # Examples trained in the epoch so far, with their loss sum and top-1
  # correct count: an epoch's training loss and accuracy after a resume are
  # those of the whole epoch, and its examples can be counted.

  epochLossSum @6 :Float64;

  epochCorrect @7 :UInt64;

  epochUnscored @8 :UInt64;
  # Of epochExamples: examples used in a step whose report never reached the
  # coordinator (a lost node's last step; elastic membership), so in neither
  # the loss sum nor the correct count. In segmentCrc32 only when non-zero
  # (files written before it keep their CRC).
}

struct DataCursor {
  epoch @0 :UInt64;
  # The epoch the cursor is in.

  batchInEpoch @1 :UInt64;
  # Index of the next batch within that epoch's shuffled order.

  shuffleSeed @2 :UInt64;
  # Seed of that epoch's shuffle, so the same order is rebuilt on resume.
}

struct Schedule {
  spec @0 :Text;
  # The learning-rate schedule spec text, e.g. "cosine base=0.1 warmup=500".

  evaluatedAtStep @1 :UInt64;
  # The step the schedule was last evaluated at.

  evaluatedAtEpoch @2 :UInt64;
  # The epoch the schedule was last evaluated at.

  learningRate @3 :Float64;
  # The learning rate it gave there.
}

struct Rng {
  seed @0 :UInt64;
  # The seed the generator started from.

  counter @1 :UInt64;
  # Values drawn so far (a counter-based generator resumes from seed+counter).
}
