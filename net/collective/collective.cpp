#include "net/collective/collective.hpp"

namespace troupe::net {

const char* to_string(CollectiveErrorKind kind) {
  switch (kind) {
    case CollectiveErrorKind::timeout:
      return "timeout";
    case CollectiveErrorKind::aborted:
      return "aborted";
    case CollectiveErrorKind::invalid:
      return "invalid";
  }
  return "?";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::mean:
      return "mean";
  }
  return "?";
}

Work::~Work() = default;
Collective::~Collective() = default;

namespace {

class CompletedWork final : public Work {
 public:
  explicit CompletedWork(std::exception_ptr error) : error_(std::move(error)) {}
  void wait(Deadline) override {
    if (error_) std::rethrow_exception(error_);
  }
  bool completed() const override { return true; }

 private:
  std::exception_ptr error_;
};

}  // namespace

std::shared_ptr<Work> completed_work(std::exception_ptr error) {
  return std::make_shared<CompletedWork>(std::move(error));
}

}  // namespace troupe::net
