// HostStaging: how a GPU replica's gradient reaches the parameter server
// and the fresh parameters come back (async and ssp modes; device.hpp).
//
// The parameter server keeps its master copy and optimizer on the host
// (docs/ARCHITECTURE.md, "Where the parameter server's optimizer runs"), so
// every push moves the gradient off the GPU and every answer moves
// parameters onto it. Both go through two page-locked ("pinned") host
// buffers owned here, with asynchronous copies on the GPU's compute stream:
//
//   push   the gradient is copied device -> pinned with cudaMemcpyAsync,
//          queued right after the backward that wrote it; the actor waits
//          for that stream (the copy is the last work queued on it), then
//          hands the server a host tensor made from the pinned buffer.
//   pull   the fresh parameters are copied into the second pinned buffer
//          (host memcpy) and from there onto the GPU with cudaMemcpyAsync,
//          not waited for: the next step's forward, queued behind it on the
//          same stream, reads them. The pinned buffer is not written again
//          before the next pull, which comes after the next push's wait on
//          that stream, by which time this copy is done.
//
// A pinned buffer moves data at the bus's full speed (a pageable one goes
// through the driver's own bounce buffer, at about half of it) and lets the
// pull overlap with the actor's next request for a batch.
//
// CPU replicas need none of this: push() returns a copy of the gradient and
// pull() copies in place, as before.
#pragma once

#include <cstddef>

#include "kernels/tensor.hpp"

namespace troupe::actors {

class HostStaging {
 public:
  // Buffers for `numel` floats, allocated at the first push on a GPU.
  HostStaging(kernels::Device device, std::int64_t numel) : device_(device), numel_(numel) {}
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // A host tensor holding `gradient` (on the replica's device), for the
  // push message. Its storage is the message's own: the server may keep it.
  kernels::Tensor push(const kernels::Tensor& gradient);
  // Starts copying the server's `fresh` parameters (host) into `parameters`
  // (on the replica's device). Later ops on the device see them.
  void pull(const kernels::Tensor& fresh, const kernels::Tensor& parameters);

 private:
  void allocate();

  kernels::Device device_;
  std::int64_t numel_;
  float* pinned_out_ = nullptr;  // device -> host (gradients)
  float* pinned_in_ = nullptr;   // host -> device (parameters)
};

}  // namespace troupe::actors
