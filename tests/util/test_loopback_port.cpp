// util/loopback_port: a port that binds now, below the kernel's ephemeral
// range; and, where none can be had, an error that says so instead of a 0
// that a server would take as "any port" and a launcher as "missing port".
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <string>

#include "util/loopback_port.hpp"

namespace troupe::util {
namespace {

TEST(LoopbackPort, APickedPortBindsAndLiesBelowTheEphemeralRange) {
  const int low = ports_detail::ephemeral_low();
  for (int i = 0; i < 20; ++i) {
    const int port = free_loopback_port();
    ASSERT_GT(port, 0);
    if (low > 11000) {
      EXPECT_GE(port, 10000);
      EXPECT_LT(port, low);
    }
    EXPECT_EQ(ports_detail::bind_loopback(port), port) << "port " << port << " was picked but does not bind";
  }
}

// A process out of file descriptors cannot open the socket to bind: the
// pick throws, with the reason, where it returned 0 before.
// Skipped under the sanitizers, whose runtime in a process without a file
// descriptor to spare reports a bad vptr in the standard library's streams.
TEST(LoopbackPort, WhereNothingBindsItThrowsSayingWhy) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' runtime needs file descriptors of its own";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "the sanitizers' runtime needs file descriptors of its own";
#endif
#endif
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string said;
    int code = 0;
    const rlimit none{0, 0};  // no new descriptor; the pipe stays writable
    if (::setrlimit(RLIMIT_NOFILE, &none) != 0) {
      code = 3;
    } else {
      try {
        said = "returned " + std::to_string(free_loopback_port());
        code = 1;
      } catch (const std::runtime_error& e) {
        said = e.what();
      }
    }
    if (!said.empty() && ::write(pipe_fds[1], said.data(), said.size()) < 0) code = 2;
    ::_exit(code);
  }
  ::close(pipe_fds[1]);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << said;
  EXPECT_NE(said.find("no free loopback port"), std::string::npos) << said;
  EXPECT_NE(said.find("Too many open files"), std::string::npos) << said;
}

}  // namespace
}  // namespace troupe::util
