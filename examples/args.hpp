// A tiny command-line reader shared by the examples: "--name value" options
// and "--flag" switches, every one declared with its help text. Anything
// else (an unknown option, a missing or malformed value) prints the usage
// and a one-line error to stderr and exits with status 2.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace examples {

class Args {
 public:
  Args(int argc, char** argv, std::string about) : about_(std::move(about)), program_(argv[0]) {
    for (int i = 1; i < argc; ++i) given_.emplace_back(argv[i]);
  }

  // Declare options before parse(); each returns the parsed value after it.
  void option(const std::string& name, const std::string& fallback, const std::string& help) {
    options_[name] = {fallback, help, false, false};
    order_.push_back(name);
  }
  void flag(const std::string& name, const std::string& help) {
    options_[name] = {"", help, true, false};
    order_.push_back(name);
  }

  void parse() {
    for (std::size_t i = 0; i < given_.size(); ++i) {
      const std::string& a = given_[i];
      if (a == "--help" || a == "-h") {
        usage(stdout);
        std::exit(0);
      }
      auto it = options_.find(a);
      if (it == options_.end()) fail("unknown argument '" + a + "'");
      it->second.set = true;
      if (it->second.is_flag) continue;
      if (i + 1 >= given_.size()) fail(a + " needs a value");
      it->second.value = given_[++i];
    }
  }

  bool has(const std::string& name) const { return options_.at(name).set; }
  std::string str(const std::string& name) const { return options_.at(name).value; }
  long long integer(const std::string& name, long long min, long long max) const {
    const std::string& v = options_.at(name).value;
    std::size_t used = 0;
    long long out = 0;
    try {
      out = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) fail(name + " must be an integer, got '" + v + "'");
    if (out < min || out > max)
      fail(name + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + v);
    return out;
  }
  double real(const std::string& name, double min, double max) const {
    const std::string& v = options_.at(name).value;
    std::size_t used = 0;
    double out = 0;
    try {
      out = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) fail(name + " must be a number, got '" + v + "'");
    if (!(out >= min && out <= max))
      fail(name + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + v);
    return out;
  }

  [[noreturn]] void fail(const std::string& message) const {
    usage(stderr);
    std::fprintf(stderr, "error: %s\n", message.c_str());
    std::exit(2);
  }

 private:
  struct Option {
    std::string value, help;
    bool is_flag, set;
  };
  void usage(std::FILE* to) const {
    std::fprintf(to, "%s\n\nusage: %s [options]\n", about_.c_str(), program_.c_str());
    for (const auto& name : order_) {
      const Option& o = options_.at(name);
      std::fprintf(to, "  %-22s %s%s\n", (name + (o.is_flag ? "" : " V")).c_str(), o.help.c_str(),
                   o.is_flag || o.value.empty() ? "" : (" (default " + o.value + ")").c_str());
    }
  }
  std::string about_, program_;
  std::vector<std::string> given_;
  std::map<std::string, Option> options_;
  std::vector<std::string> order_;
};

}  // namespace examples
