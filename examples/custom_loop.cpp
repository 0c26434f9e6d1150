// custom_loop: TensorFlow's "Custom training with tf.distribute.Strategy"
// tutorial: a hand-written training step run on every replica
// (strategy.run(train_step)), the per-replica losses reduced by SUM
// (strategy.reduce(SUM, ...)), on Fashion-MNIST.
//
// What it shows:
//   - create_replicas (TF's `with strategy.scope():`): one model and one
//     optimizer per device, identically initialised;
//   - distribute (experimental_distribute_dataset): each step, replica r gets
//     its shard of the global batch;
//   - the step function: forward, loss, backward on the replica's batch; the
//     strategy then all-reduces (sums) the gradients and every replica applies
//     the same update, so the replicas stay identical (checked at the end);
//   - why the loss is divided by the GLOBAL batch size (see train_step).
//
// How to run:
//   build/examples/custom_loop                        # 10 epochs of the CNN on 2 CPU devices (or every GPU)
//   build/examples/custom_loop --short                # 30 steps, evaluated on 1000 test examples: seconds
//   build/examples/custom_loop --devices cpu:0,cpu:1 --model mlp --epochs 2 --steps 200
#include <cstdio>
#include <cstring>
#include <exception>

#include <troupe/troupe.hpp>

#include "args.hpp"

int main(int argc, char** argv) {
  examples::Args args(argc, argv,
                      "custom_loop: a custom training loop on MirroredStrategy (strategy.run(train_step), "
                      "strategy.reduce(SUM, per_replica_losses)) on Fashion-MNIST");
  args.option("--devices", "", "devices, e.g. cpu:0,cpu:1 (default: every GPU, else 2 CPU devices)");
  args.option("--model", "cnn", "zoo model (mlp, cnn) or a model spec file");
  args.option("--epochs", "10", "epochs (the tutorial: 10)");
  args.option("--steps", "0",
              "steps per epoch (0: a whole pass over the data; fewer: the next epoch continues the data order)");
  args.option("--batch", "64", "examples per replica and step (global batch = this x replicas)");
  args.option("--lr", "0.001", "Adam's learning rate");
  args.option("--seed", "0", "seed of initialisation and shuffling");
  args.flag("--short", "one epoch of 30 steps, evaluated on the first 1000 test examples");
  args.parse();
  long long epochs = args.integer("--epochs", 1, 1000);
  long long steps = args.integer("--steps", 0, 1LL << 40);
  const long long batch = args.integer("--batch", 1, 65536);
  const float lr = static_cast<float>(args.real("--lr", 1e-9, 10.0));
  const long long seed = args.integer("--seed", 0, 1LL << 62);
  const bool short_run = args.has("--short");
  if (short_run && (args.has("--epochs") || args.has("--steps")))
    args.fail("--short chooses the epochs and steps itself; drop --epochs / --steps");
  if (short_run) {
    epochs = 1;
    steps = 30;
  }

  try {
    std::vector<troupe::Device> devices;
    try {
      if (!args.str("--devices").empty()) devices = troupe::parse_devices(args.str("--devices"));
    } catch (const std::exception& e) {
      args.fail(e.what());
    }
    troupe::MirroredStrategy strategy(devices);
    const int replicas = strategy.num_replicas_in_sync();
    const long long global_batch = batch * replicas;  // GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * replicas
    std::printf("Number of devices: %d; batch %lld per replica, %lld global\n", replicas, batch, global_batch);

    troupe::Splits data = troupe::load_data("fashion-mnist");
    if (short_run) {
      std::vector<std::int64_t> first(1000);
      for (std::int64_t i = 0; i < 1000; ++i) first[static_cast<std::size_t>(i)] = i;
      data.test = troupe::data::select_examples(data.test, first, "test");
    }

    // with strategy.scope(): model = create_model(); optimizer = Adam()
    troupe::OptimizerConfig adam;
    adam.name = "adam";
    strategy.create_replicas(troupe::model_spec(args.str("--model"), data.train), adam,
                             static_cast<std::uint64_t>(seed));
    // train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
    strategy.distribute(data.train, global_batch, static_cast<std::uint64_t>(seed));

    // def train_step(inputs): runs on every replica, on its own thread, with
    // its own part of the global batch.
    //
    // Loss scaling. Each replica sees `batch` examples, one shard of the
    // global batch of `global_batch`. The gradients of the
    // replicas are SUMMED by the all-reduce. For the update to be the gradient
    // of the mean loss over the global batch (what one device with the whole
    // global batch would compute), each replica must divide the SUM of its
    // per-example losses by the GLOBAL batch size, not by its own batch size:
    //   sum_r (1/G) sum_{i in shard r} l_i  =  (1/G) sum_{i in global batch} l_i.
    // Dividing by the local batch instead would make the update `replicas`
    // times too large. compute_average_loss does exactly this (it is
    // tf.nn.compute_average_loss(per_example_loss, global_batch_size)), and
    // fills the gradient of that scaled loss for backward().
    auto train_step = [](troupe::ReplicaContext& ctx) -> double {
      const troupe::Tensor& logits = ctx.model.forward(ctx.features, /*training=*/true);
      const double loss = ctx.compute_average_loss(logits);  // sum of losses / GLOBAL batch
      ctx.model.backward(ctx.output_gradient());             // gradients of that loss
      return loss;                                           // this replica's share of the global mean loss
    };

    for (long long epoch = 0; epoch < epochs; ++epoch) {
      // def distributed_train_step(inputs):
      //   per_replica_losses = strategy.run(train_step, args=(inputs,))
      //   return strategy.reduce(SUM, per_replica_losses, axis=None)
      double total_loss = 0;
      long long num_batches = 0;
      const long long n =
          steps > 0 ? std::min<long long>(steps, strategy.steps_per_epoch()) : strategy.steps_per_epoch();
      for (long long s = 0; s < n; ++s) {
        troupe::PerReplica per_replica_losses = strategy.run(train_step, lr);
        // SUM, not MEAN: each value is already divided by the global batch,
        // so their sum is the mean loss over the global batch.
        total_loss += troupe::MirroredStrategy::reduce(troupe::ReduceOp::SUM, per_replica_losses);
        ++num_batches;
      }
      const double train_loss = total_loss / double(num_batches);
      const troupe::EpochResult test = troupe::evaluate(strategy.replica(0), data.test);
      std::printf("Epoch %lld, Loss: %.4f, Test Loss: %.4f, Test Accuracy: %.2f%%  (%lld steps)\n", epoch + 1,
                  train_loss, test.test_loss, 100.0 * test.test_accuracy, num_batches);
      std::fflush(stdout);
    }

    // Every replica applied the same summed gradient: they are identical.
    const std::vector<float> p0 = strategy.replica(0).parameters().to_vector();
    for (int r = 1; r < replicas; ++r) {
      const std::vector<float> pr = strategy.replica(r).parameters().to_vector();
      if (pr.size() != p0.size() || std::memcmp(pr.data(), p0.data(), p0.size() * sizeof(float)) != 0) {
        std::fprintf(stderr, "error: replica %d's parameters differ from replica 0's\n", r);
        return 1;
      }
    }
    std::printf("replicas identical after training: yes (%d replicas, %lld parameters each)\n", replicas,
                static_cast<long long>(p0.size()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
