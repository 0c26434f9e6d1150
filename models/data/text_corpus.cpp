#include "models/data/text_corpus.hpp"

#include <openssl/evp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include "models/data/error.hpp"
#include "models/data/file_bytes.hpp"
#include "util/openssl_init.hpp"

extern char** environ;

namespace troupe::data {

namespace {

Dataset text_split(const std::string& source, const char* split, const std::vector<std::int32_t>& ids,
                   std::int64_t begin, std::int64_t end, std::int64_t context,
                   const std::vector<std::string>& vocabulary) {
  Dataset d;
  d.name = source;
  d.split = split;
  d.task = Task::classification;
  d.num_classes = static_cast<int>(vocabulary.size());
  d.vocabulary = vocabulary;
  d.window = context;
  d.features = kernels::Tensor::empty(kernels::Shape{end - begin}, kernels::DType::i32);
  std::memcpy(d.features.raw(), ids.data() + begin, static_cast<std::size_t>(end - begin) * sizeof(std::int32_t));
  d.validate();
  return d;
}

std::string hex(std::uint8_t byte) {
  static const char digits[] = "0123456789abcdef";
  return {digits[byte >> 4], digits[byte & 15]};
}

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  util::init_openssl();
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256: OpenSSL's EVP_Digest failed");
  std::string out;
  for (unsigned int i = 0; i < size; ++i) out += hex(digest[i]);
  return out;
}

Splits text_splits(const std::string& bytes, const std::string& source, const TextOptions& options) {
  const std::int64_t n = static_cast<std::int64_t>(bytes.size());
  const std::int64_t t = options.context;
  if (t < 1) throw DataError(source + ": the context (window length) must be >= 1, got " + std::to_string(t), source);
  if (n == 0) throw DataError(source + ": the file is empty; a language model needs text to train on", source);
  std::array<bool, 256> seen{};
  for (const char c : bytes) seen[static_cast<unsigned char>(c)] = true;
  std::array<std::int32_t, 256> id{};
  std::vector<std::string> vocabulary;
  for (int b = 0; b < 256; ++b) {
    if (!seen[static_cast<std::size_t>(b)]) continue;
    id[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(vocabulary.size());
    vocabulary.emplace_back(1, static_cast<char>(b));
  }
  if (vocabulary.size() < 2)
    throw DataError(source + ": every byte is 0x" + hex(static_cast<std::uint8_t>(bytes[0])) +
                        "; a vocabulary of one byte leaves nothing to predict",
                    source);
  const auto cut = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * options.train_fraction));
  const std::int64_t need = t + 2;
  if (cut < need || n - cut < need)
    throw DataError(source + ": " + std::to_string(n) + " bytes split into " + std::to_string(cut) + " to train and " +
                        std::to_string(n - cut) + " to validate, but each split needs at least " +
                        std::to_string(need) + " bytes (context " + std::to_string(t) +
                        " + 2): give a longer text or a shorter --context",
                    source);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    ids[static_cast<std::size_t>(i)] = id[static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)])];
  return {text_split(source, "train", ids, 0, cut, t, vocabulary),
          text_split(source, "test", ids, cut, n, t, vocabulary)};
}

Splits load_text_file(const std::string& path, const TextOptions& options) {
  if (!file_exists(path))
    throw DataError("text:" + path + ": no such file (text:FILE trains a language model on FILE's bytes)", path);
  return text_splits(read_file_bytes(path), path, options);
}

std::string kjv_text() {
  // posix_spawn, not popen: the shell would be one more program, and the
  // child must not inherit COLUMNS, which sets the line width.
  std::vector<std::string> kept;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "COLUMNS=", 8) != 0) kept.emplace_back(*e);
  std::vector<char*> env;
  for (auto& s : kept) env.push_back(s.data());
  env.push_back(nullptr);
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw DataError(std::string("kjv: pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::string program = "bible", range = "Genesis1:1-Revelation22:21";
  char* argv[] = {program.data(), range.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "bible", &actions, nullptr, argv, env.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    throw DataError("kjv: cannot run 'bible' (" + std::string(std::strerror(spawned)) +
                    "): install the Debian package bible-kjv (scripts/setup.sh does)");
  }
  std::string text;
  std::array<char, 1 << 16> chunk{};
  for (;;) {
    const ssize_t got = ::read(pipe_fds[0], chunk.data(), chunk.size());
    if (got > 0) {
      text.append(chunk.data(), static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw DataError("kjv: 'bible Genesis1:1-Revelation22:21' failed (status " + std::to_string(status) +
                    "); reinstall the Debian package bible-kjv");
  const std::string hash = sha256_hex(text);
  if (hash != kjv_sha256)
    throw DataError("kjv: 'bible Genesis1:1-Revelation22:21' printed " + std::to_string(text.size()) +
                    " bytes with SHA-256 " + hash.substr(0, 16) + "..., not the " + std::to_string(kjv_bytes) +
                    " bytes with SHA-256 " + std::string(kjv_sha256).substr(0, 16) +
                    "... troupe expects (another bible-kjv version?)");
  return text;
}

Splits load_kjv(const TextOptions& options) { return text_splits(kjv_text(), "kjv", options); }

}  // namespace troupe::data
