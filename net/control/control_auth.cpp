#include "net/control/control_auth.hpp"

#include <ctime>

#include "net/crypto/crypto.hpp"
#include "util/config_file.hpp"

namespace troupe::net {

namespace {
constexpr std::size_t kNonceBytes = 16;

std::string control_mac(const std::string& key, const std::string& method, const std::string& target,
                        const std::string& body, const std::string& ts, const std::string& nonce) {
  return to_hex(hmac_sha256(key, std::string(kControlKeyLabel) + "\n" + method + "\n" + target + "\n" + ts + "\n" +
                                     nonce + "\n" + to_hex(sha256(body))));
}

// "ts=1,nonce=ab,mac=cd" -> the three values; false when a field is
// missing, repeated or unknown.
bool parse_fields(const std::string& text, std::string& ts, std::string& nonce, std::string& mac) {
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string field = text.substr(pos, end - pos);
    const auto eq = field.find('=');
    if (eq == std::string::npos) return false;
    const std::string name = field.substr(0, eq), value = field.substr(eq + 1);
    std::string* slot = name == "ts" ? &ts : name == "nonce" ? &nonce : name == "mac" ? &mac : nullptr;
    if (slot == nullptr || !slot->empty() || value.empty()) return false;
    *slot = value;
    pos = end + 1;
  }
  return !ts.empty() && !nonce.empty() && !mac.empty();
}
}  // namespace

std::string load_metrics_token(const std::string& path) {
  const std::string text = util::read_config_file(path, "metrics token file", 4096);
  const auto first = text.find_first_not_of(" \t\r\n");
  const std::string token =
      first == std::string::npos ? "" : text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
  const std::string how = " (make one with: openssl rand -hex 32 > " + path + ")";
  if (token.size() < 16)
    throw util::ConfigFileError("metrics token file '" + path + "' holds " + std::to_string(token.size()) +
                                " characters; a token needs at least 16" + how);
  for (std::size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    if (c < 0x21 || c > 0x7e)
      throw util::ConfigFileError("metrics token file '" + path + "': character " + std::to_string(i + 1) +
                                  " of the token is not visible ASCII (a token is one word sent in an HTTP header)" +
                                  how);
  }
  return token;
}

std::int64_t unix_seconds_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

std::string sign_control_request(const std::string& key, const std::string& method, const std::string& target,
                                 const std::string& body, std::int64_t unix_seconds) {
  const std::string ts = std::to_string(unix_seconds), nonce = to_hex(random_bytes(kNonceBytes));
  return std::string(kControlAuthScheme) + " ts=" + ts + ",nonce=" + nonce +
         ",mac=" + control_mac(key, method, target, body, ts, nonce);
}

ControlAuth::ControlAuth(std::string key, std::chrono::seconds window)
    : key_(std::move(key)), window_(static_cast<std::int64_t>(window.count())) {}

std::string ControlAuth::check(const std::string& authorization, const std::string& method, const std::string& target,
                               const std::string& body, std::int64_t now) {
  const std::string how = " (troupe ctl signs requests with --secret-file or TROUPE_SECRET, the job's secret)";
  if (authorization.empty())
    return "no credential: this endpoint needs an Authorization: " + std::string(kControlAuthScheme) + " header" + how;
  const std::string scheme = std::string(kControlAuthScheme) + " ";
  std::string ts, nonce, mac;
  if (authorization.compare(0, scheme.size(), scheme) != 0 ||
      !parse_fields(authorization.substr(scheme.size()), ts, nonce, mac))
    return "malformed credential: expected " + scheme + "ts=UNIX_SECONDS,nonce=HEX,mac=HEX" + how;
  std::int64_t stamp = 0;
  try {
    std::size_t used = 0;
    stamp = std::stoll(ts, &used);
    if (used != ts.size()) throw std::invalid_argument(ts);
  } catch (const std::exception&) {
    return "malformed credential: ts '" + ts + "' is not a number of seconds";
  }
  // The MAC first: a stale or replayed stamp is reported only for requests
  // that prove the key, so the reasons tell an outsider nothing.
  if (!constant_time_equal(control_mac(key_, method, target, body, ts, nonce), mac))
    return "credential does not match: a different secret, or an altered request" + how;
  // now - stamp can overflow for a stamp near either end of int64 (it did,
  // in fuzz/control_http: undefined behaviour); compare without subtracting
  // it, and take the distance in unsigned arithmetic, where it is exact.
  if (stamp < now - window_ || stamp > now + window_) {
    const bool future = stamp > now;
    const std::uint64_t distance = future ? static_cast<std::uint64_t>(stamp) - static_cast<std::uint64_t>(now)
                                          : static_cast<std::uint64_t>(now) - static_cast<std::uint64_t>(stamp);
    return "credential is " + std::to_string(distance) + " s " + (future ? "in the future" : "old") + " (at most " +
           std::to_string(window_) + " s: are both clocks right?)";
  }
  std::lock_guard<std::mutex> lock(mutex_);
  while (!seen_by_time_.empty() && seen_by_time_.begin()->first < now - window_) {
    seen_.erase(seen_by_time_.begin()->second);
    seen_by_time_.erase(seen_by_time_.begin());
  }
  if (!seen_.emplace(nonce, stamp).second) return "credential already used (a replayed request)";
  seen_by_time_.emplace(stamp, nonce);
  return {};
}

}  // namespace troupe::net
