// Whole-file reads for the dataset readers. A file that starts with the
// gzip magic (1f 8b) is decompressed whatever its name; any other file is
// read as it is. Offsets in later error messages are offsets into the bytes
// returned here (the decompressed stream for a gzipped file).
#pragma once

#include <string>

namespace troupe::data {

// Throws DataError naming the file when it cannot be opened or read, or
// when its gzip stream is corrupt or ends early.
std::string read_file_bytes(const std::string& path);

bool file_exists(const std::string& path);
bool directory_exists(const std::string& path);

}  // namespace troupe::data
