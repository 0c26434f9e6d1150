// Where an async or ssp step's gradient goes: the parameter server's shards,
// reached one of three ways, chosen once per view from the device's
// configuration (as c10d picks a Backend per process group), so that a
// step makes one call instead of walking an if-chain:
//
//   data plane   shards on ps tasks, or a worker node's pushes to the
//                coordinator's shards: a PushClient per server address
//                (net/push/push_link.hpp); every part goes out, then the
//                answers come back in the same order;
//   cores        the coordinator's own replicas: each part applied to its
//                shard's core on the device's thread (actors/ps/shard.hpp),
//                no message to the shard's actor and back;
//   actors       the shard actors themselves (a device given the actors
//                only): a request per shard, awaited.
//
// Protocol: push() sends every shard its part of `packed` (the gradient in
// the partition's packed layout, on the host) and writes each shard's fresh
// parameters into `target` (the flat buffer, on the host). Then exactly
// one of `done` or `failed` is called: from inside push() for the data
// plane and the cores, from the actor's behaviour (an awaited response)
// for the actors. `failed(why, interrupted)`: interrupted is true where a
// link of the data plane broke (a ps task lost, its shards placed anew),
// which an elastic job survives; `why` is then the link's error, else the
// whole reason naming the shard. The data plane sink makes new links on
// its next push. A sink is used by its device only, one push
// at a time.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/device_protocol.hpp"
#include "actors/ps/partition.hpp"
#include "actors/ps/shard.hpp"
#include "kernels/tensor.hpp"
#include "net/deadline.hpp"
#include "net/push/push_routes.hpp"

namespace troupe::actors {

class GradientSink {
 public:
  struct Push {
    std::uint32_t view = 0;
    int rank = 0;
    std::int64_t clock = 0;  // the replica's clock after this step
    Tensor packed;           // the gradient, packed (a view of the model's gradients when the partition is whole)
    Tensor target;           // the flat parameters the fresh parts are unpacked into
  };
  // answered: when the last answer arrived; staleness: shard 0's, as its
  // answer on the data plane says (-1 where the shard records it itself).
  using Done = std::function<void(net::Clock::time_point answered, std::int64_t staleness)>;
  using Failed = std::function<void(const std::string& why, bool interrupted)>;

  virtual ~GradientSink() = default;
  virtual const char* kind() const = 0;  // "data plane", "cores", "actors"
  const ps::Partition& partition() const { return *partition_; }
  virtual void push(const Push& p, Done done, Failed failed) = 0;

 protected:
  explicit GradientSink(std::shared_ptr<const ps::Partition> partition) : partition_(std::move(partition)) {}
  std::shared_ptr<const ps::Partition> partition_;
};

// The sink for a device's configuration: the data plane when it has push
// routes, else the shards' cores when it has them, else the shard actors
// (`self`, the device, sends the requests; `timeout` bounds each).
std::shared_ptr<GradientSink> make_gradient_sink(device_actor_t::pointer self,
                                                 std::shared_ptr<const ps::Partition> partition,
                                                 std::shared_ptr<const net::push::PushRoutes> routes,
                                                 std::vector<std::shared_ptr<ps::ShardCore>> cores,
                                                 std::vector<ps::ps_actor_t> shards, std::chrono::milliseconds timeout);
// The same from any event-based actor (the tests push without a device).
std::shared_ptr<GradientSink> make_gradient_sink(caf::event_based_actor* self,
                                                 std::shared_ptr<const ps::Partition> partition,
                                                 std::shared_ptr<const net::push::PushRoutes> routes,
                                                 std::vector<std::shared_ptr<ps::ShardCore>> cores,
                                                 std::vector<ps::ps_actor_t> shards, std::chrono::milliseconds timeout);

}  // namespace troupe::actors
