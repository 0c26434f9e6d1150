// Sealed links (net/crypto/aead.hpp, net/transport/sealed.hpp): the keys of a
// connection's two directions, records over a real socket pair, every way a
// record can be wrong on arrival (a bit flipped in the length, the
// ciphertext or the tag; replayed; reordered; reflected back with the
// sender's own key; too long), and a sealed ring whose every operation gives
// the same bits as the plaintext ring.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "net/crypto/aead.hpp"
#include "net/crypto/crypto.hpp"
#include "net/transport/sealed.hpp"
#include "net/tcp/wire.hpp"
#include "tests/net/test_tcp_support.hpp"

namespace troupe::net {
namespace {

using namespace std::chrono_literals;
using namespace troupe::net::testing;
using wire::AuthenticationError;
using wire::RecordOpener;
using wire::RecordSealer;

const std::string kSession(32, 's');

// ---------------------------------------------------------------------------
// Keys.

TEST(TcpSealed, EachDirectionHasItsOwnKeyAndBothEndsAgree) {
  const LinkKeys acceptor = link_keys(kSession, true), joiner = link_keys(kSession, false);
  EXPECT_TRUE(acceptor.protects());
  EXPECT_EQ(acceptor.send.size(), kAeadKeyBytes);
  EXPECT_EQ(acceptor.send, joiner.receive);
  EXPECT_EQ(acceptor.receive, joiner.send);
  EXPECT_NE(acceptor.send, acceptor.receive);
  EXPECT_NE(link_keys(std::string(32, 't'), true).send, acceptor.send);
  EXPECT_FALSE(link_keys("", true).protects());
}

TEST(TcpSealed, AeadDirectionRefusesMisuse) {
  EXPECT_THROW(AeadDirection("short"), std::invalid_argument);
  AeadDirection d(std::string(kAeadKeyBytes, 'k'));
  unsigned char tag[kAeadTagBytes];
  char text[4] = {1, 2, 3, 4};
  d.seal(nullptr, 0, text, text, sizeof text, tag);
  EXPECT_THROW(d.open(nullptr, 0, text, text, sizeof text, tag), std::logic_error);
}

// ---------------------------------------------------------------------------
// Records over a socket pair.

struct Pair {
  int fds[2] = {-1, -1};
  Pair() {
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw std::runtime_error("socketpair");
    wire::prepare_socket(fds[0]);  // non-blocking, as the transports use them (TCP_NODELAY fails harmlessly)
    wire::prepare_socket(fds[1]);
  }
  ~Pair() {
    for (int fd : fds) ::close(fd);
  }
  // Raw bytes as the wire carries them.
  void put(const std::string& bytes) { wire::write_all(fds[0], bytes.data(), bytes.size(), nullptr, 0, soon()); }
  static Deadline soon() { return Clock::now() + 2s; }
};

// Records as a sender with `key` seals them, as bytes.
std::vector<std::string> sealed(const std::string& key, const std::vector<std::string>& messages) {
  RecordSealer sealer(key);
  std::vector<std::string> out;
  for (const auto& m : messages) {
    std::string record(m.size() + wire::kRecordOverhead, '\0');
    sealer.seal(m.data(), m.size(), record.data());
    out.push_back(record);
  }
  return out;
}

// What an opener with `key` makes of `bytes`: the messages it opened, then
// the error that stopped it ("" when none).
std::pair<std::vector<std::string>, std::string> open_all(const std::string& key, const std::string& bytes,
                                                          std::size_t max = 1 << 20) {
  Pair p;
  p.put(bytes);
  ::shutdown(p.fds[0], SHUT_WR);
  RecordOpener opener(key);
  std::vector<std::string> got;
  try {
    for (;;) {
      std::string m(max, '\0');
      m.resize(opener.read(p.fds[1], m.data(), max, Pair::soon()));
      got.push_back(m);
    }
  } catch (const wire::IoError&) {
    return {got, ""};  // end of stream
  } catch (const std::exception& e) {
    return {got, e.what()};
  }
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += p;
  return out;
}

const LinkKeys kJoiner = link_keys(kSession, false), kAcceptor = link_keys(kSession, true);
const std::vector<std::string> kMessages = {"first", std::string(100000, 'x'), "", "last"};

TEST(TcpSealed, RecordsRoundTripAndHideThePlaintext) {
  const auto records = sealed(kJoiner.send, kMessages);
  EXPECT_EQ(records[1].find(std::string(64, 'x')), std::string::npos) << "the plaintext is visible on the wire";
  const auto [got, error] = open_all(kAcceptor.receive, join(records));
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, kMessages);
  // A sealer and an opener on one socket, through the fd helpers.
  Pair p;
  RecordSealer out(kJoiner.send);
  RecordOpener in(kAcceptor.receive);
  out.append("ab", 2);
  out.append("cde", 3);
  out.flush(p.fds[0], Pair::soon());
  char buffer[8];
  EXPECT_EQ(in.read(p.fds[1], buffer, sizeof buffer, Pair::soon()), 2u);
  in.read_exact(p.fds[1], buffer, 3, Pair::soon());
  EXPECT_EQ(std::string(buffer, 3), "cde");
  EXPECT_EQ(in.records(), 2u);
}

TEST(TcpSealed, AnyFlippedBitFailsAuthentication) {
  const auto records = sealed(kJoiner.send, {"first", "second message"});
  const std::string good = records[0];
  // In the second record: a ciphertext byte, a tag byte, and the length made
  // shorter (14 -> 12: the tag is then read from the wrong bytes).
  for (std::size_t at : {std::size_t{6}, records[1].size() - 1, std::size_t{0}}) {
    std::string bad = records[1];
    bad[at] ^= at == 0 ? 0x02 : 0x40;
    const auto [got, error] = open_all(kAcceptor.receive, good + bad);
    ASSERT_EQ(got.size(), 1u) << "byte " << at;
    EXPECT_EQ(got[0], "first");
    EXPECT_NE(error.find("record 1 failed authentication"), std::string::npos) << "byte " << at << ": " << error;
  }
  // The length made longer (14 -> 15): the record never completes, and
  // nothing of it is delivered (the stream ends first here; a live
  // connection waits until its deadline).
  std::string longer = records[1];
  longer[0] ^= 0x01;
  const auto [got, error] = open_all(kAcceptor.receive, good + longer);
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(error, "");
}

TEST(TcpSealed, ReplayedReorderedDroppedAndReflectedRecordsFail) {
  const auto r = sealed(kJoiner.send, {"zero", "one1", "two2"});
  auto failure = [&](const std::string& bytes, const std::string& key) { return open_all(key, bytes).second; };
  EXPECT_NE(failure(r[0] + r[0], kAcceptor.receive).find("record 1 failed authentication"), std::string::npos);
  EXPECT_NE(failure(r[0] + r[2] + r[1], kAcceptor.receive).find("record 1 failed"), std::string::npos);
  EXPECT_NE(failure(r[1] + r[2], kAcceptor.receive).find("record 0 failed"), std::string::npos);
  // Sent back to the joiner, which opens with its receive key.
  EXPECT_NE(failure(r[0], kJoiner.receive).find("record 0 failed"), std::string::npos);
  // Another connection's keys.
  EXPECT_NE(failure(r[0], link_keys(std::string(32, 'o'), true).receive).find("failed"), std::string::npos);
}

TEST(TcpSealed, AfterAFailureTheOpenerStaysShut) {
  const auto r = sealed(kJoiner.send, {"zero", "one1"});
  RecordOpener opener(kAcceptor.receive);
  std::string bad = r[0];
  bad[5] ^= 1;
  char out[8];
  EXPECT_THROW(opener.open(bad.data(), bad.size(), out, sizeof out), AuthenticationError);
  // Even the genuine records do not open any more: the stream lost its place.
  EXPECT_THROW(opener.open(r[1].data(), r[1].size(), out, sizeof out), AuthenticationError);
}

TEST(TcpSealed, ATooLongRecordIsRefusedBeforeItIsRead) {
  const auto r = sealed(kJoiner.send, {std::string(1000, 'y')});
  const auto [got, error] = open_all(kAcceptor.receive, r[0], 999);
  EXPECT_TRUE(got.empty());
  EXPECT_NE(error.find("length field of 1000 bytes, more than the 999 expected"), std::string::npos) << error;
  // From a buffer: incomplete is not an error, too long is.
  RecordOpener opener(kAcceptor.receive);
  char out[1000];
  EXPECT_EQ(opener.open(r[0].data(), 10, out, sizeof out).consumed, 0u);
  EXPECT_THROW(opener.open(r[0].data(), r[0].size(), out, 999), std::runtime_error);
}

// ---------------------------------------------------------------------------
// The sealed ring gives the plaintext ring's bits.

std::function<LinkKeys(int, bool, Deadline)> fixed_keys() {
  return [](int, bool accepting, Deadline) { return link_keys(kSession, accepting); };
}

// Every operation once on a ring of 3, small chunks so that each is many
// frames; everything the ranks end with, in order.
std::vector<std::vector<float>> run_everything(bool seal) {
  auto groups = thread_ring(3, 10s, 4096, seal ? fixed_keys() : nullptr);
  std::vector<std::vector<float>> results(3);
  std::mutex mutex;
  run_ranks(groups, [&](int r, Collective& c) {
    const auto d = Clock::now() + 10s;
    std::vector<std::vector<float>> mine;
    for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{100003}}) {
      Tensor t = tensor_of(random_values(n, 7 + static_cast<unsigned>(r)));
      c.allreduce(t, ReduceOp::sum)->wait(d);
      mine.push_back(t.to_vector());
    }
    Tensor b = tensor_of(random_values(5000, 11 + static_cast<unsigned>(r)));
    c.broadcast(b, 2)->wait(d);
    mine.push_back(b.to_vector());
    Tensor gathered = Tensor::zeros(Shape{3 * 777});
    c.allgather(tensor_of(random_values(777, 13 + static_cast<unsigned>(r))), gathered)->wait(d);
    mine.push_back(gathered.to_vector());
    Tensor in = Tensor::zeros(Shape{3001});
    if (r == 0) {
      c.send(tensor_of(random_values(3001, 17)), 1, 4)->wait(d);
      c.recv(in, 2, 4)->wait(d);
    } else {
      c.recv(in, r - 1, 4)->wait(d);
      c.send(in, (r + 1) % 3, 4)->wait(d);
    }
    mine.push_back(in.to_vector());
    c.barrier()->wait(d);
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& v : mine) results[static_cast<std::size_t>(r)].insert(results[static_cast<std::size_t>(r)].end(), v.begin(), v.end());
  });
  return results;
}

TEST(TcpSealed, EveryOperationOnASealedRingGivesThePlaintextRingsBits) {
  const auto plain = run_everything(false);
  const auto sealed_ring = run_everything(true);
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(plain[static_cast<std::size_t>(r)].empty());
    EXPECT_TRUE(plain[static_cast<std::size_t>(r)] == sealed_ring[static_cast<std::size_t>(r)]) << "rank " << r;
  }
}

TEST(TcpSealed, ARingWhoseEndsHoldDifferentKeysNeverConnects) {
  // Rank 1 derives its keys from another session key: every Hello fails to
  // open, so no group forms (the accepting ranks drop the connections and
  // log why) and make_tcp_group times out naming the peer.
  Listeners l(2);
  std::vector<std::string> errors(2);
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      TcpGroupConfig c = config_for(l, r, 2s);
      c.connect_timeout = 1500ms;
      const std::string session = r == 0 ? kSession : std::string(32, 'z');
      c.authenticate = [session](int, bool accepting, Deadline) { return link_keys(session, accepting); };
      try {
        make_tcp_group(c);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(errors[0], "");
  EXPECT_NE(errors[1], "");
  EXPECT_NE(logged.find("failed authentication"), std::string::npos) << logged.substr(0, 2000);
}

}  // namespace
}  // namespace troupe::net
