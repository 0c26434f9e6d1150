// Text for a language model: any file's bytes as token ids, as nanoGPT's
// shakespeare_char prepares them, and the King James Bible that Debian's
// bible-kjv package prints, the default corpus.
//
//   vocabulary  the file's distinct bytes, sorted: token id i is the byte
//               vocabulary[i] (73 ids for the KJV). Models keep it in their
//               spec (`vocabulary hex=...`), so a checkpoint can encode a
//               prompt and decode a sample without the file.
//   splits      the first 90% of the bytes train, the last 10% validate
//               (floor(0.9 n) bytes train, as the anchor cuts them)
//   examples    windows (Dataset::window): T ids and the T ids one byte
//               later; training draws window offsets at random (the epoch
//               plan's windows), evaluation tiles the split in order
//
// Bad input is a DataError naming the file: missing, empty, a vocabulary
// of one byte, or a split shorter than T + 2 bytes.
#pragma once

#include <cstdint>
#include <string>

#include "models/data/dataset.hpp"

namespace troupe::data {

struct TextOptions {
  std::int64_t context = 64;  // T, the window length (the model's context)
  double train_fraction = 0.9;
};

// Both splits of `bytes`, read from `source` (named in errors and as the
// datasets' name).
Splits text_splits(const std::string& bytes, const std::string& source, const TextOptions& options = {});

// text:FILE.
Splits load_text_file(const std::string& path, const TextOptions& options = {});

// The King James Bible exactly as `bible Genesis1:1-Revelation22:21` prints
// it with COLUMNS unset (its line width follows COLUMNS): 4,298,239 bytes,
// 73 distinct, checked against its SHA-256. DataError naming the Debian
// package bible-kjv when the program is missing, and the hash when the
// output differs.
std::string kjv_text();
constexpr const char* kjv_sha256 = "82fa5f3788c6a9a010fb128a0f0bf588984b5888a82058520620eded59b033ea";
constexpr std::int64_t kjv_bytes = 4298239;
Splits load_kjv(const TextOptions& options = {});

// The SHA-256 of `bytes`, lower-case hex.
std::string sha256_hex(const std::string& bytes);

}  // namespace troupe::data
