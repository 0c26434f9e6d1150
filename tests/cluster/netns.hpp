// Network namespaces for multi-node tests: each node in its own network
// stack (as separate hosts are), joined by veth pairs to one bridge on the
// host side. Needs root (CAP_NET_ADMIN); a test skips with a message when
// they cannot be made. Everything is removed on destruction.
//
//   Namespaces net(3);                    // 10.231.T.1 .. 10.231.T.3
//   if (!net.ok()) GTEST_SKIP() << net.why();
//   net.exec(1, {TROUPE_BINARY, "node", ...})  -> argv for Process
//   net.link(2, false);                   // cut node 2 off (its veth down)
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace troupe {

class Namespaces {
 public:
  explicit Namespaces(int count) : tag_(std::to_string(getpid() % 100000)), bridge_("trb" + tag_) {
    if (geteuid() != 0) {
      why_ = "needs root for ip netns (running as uid " + std::to_string(geteuid()) + ")";
      return;
    }
    bool ok = sh("ip link add " + bridge_ + " type bridge") && sh("ip link set " + bridge_ + " up");
    for (int i = 0; ok && i < count; ++i) {
      const std::string n = "trn" + tag_ + "-" + std::to_string(i);
      const std::string veth = "trv" + tag_ + "-" + std::to_string(i);
      ok = sh("ip netns add " + n);
      if (ok) names_.push_back(n);
      ok = ok && sh("ip link add " + veth + " type veth peer name eth0 netns " + n) &&
           sh("ip link set " + veth + " master " + bridge_ + " up") &&
           sh("ip -n " + n + " addr add " + address(i) + "/24 dev eth0") && sh("ip -n " + n + " link set eth0 up") &&
           sh("ip -n " + n + " link set lo up");
      if (ok) veths_.push_back(veth);
    }
    if (!ok) why_ = "could not create network namespaces and veth links here (no CAP_NET_ADMIN in this container?)";
  }
  ~Namespaces() {
    for (auto& n : names_) sh("ip netns del " + n);
    sh("ip link del " + bridge_);
  }
  Namespaces(const Namespaces&) = delete;
  Namespaces& operator=(const Namespaces&) = delete;

  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  // Node i's address: 10.231.<tag>.<i + 1>.
  std::string address(int i) const { return "10.231." + tag_.substr(0, 2) + "." + std::to_string(i + 1); }
  std::string subnet() const { return "10.231." + tag_.substr(0, 2) + "."; }
  // argv running `command` in node i's namespace.
  std::vector<std::string> exec(int i, const std::vector<std::string>& command) const {
    std::vector<std::string> out{"/usr/sbin/ip", "netns", "exec", names_.at(static_cast<std::size_t>(i))};
    out.insert(out.end(), command.begin(), command.end());
    return out;
  }
  // Node i's link up or down (down: a cut cable; its process keeps running).
  bool link(int i, bool up) const {
    return sh("ip link set " + veths_.at(static_cast<std::size_t>(i)) + (up ? " up" : " down"));
  }

 private:
  static bool sh(const std::string& cmd) { return std::system((cmd + " > /dev/null 2>&1").c_str()) == 0; }
  std::string tag_, bridge_, why_;
  std::vector<std::string> names_, veths_;
};

}  // namespace troupe
