// mirrored_fashion_mnist: TensorFlow's "Distributed training with Keras"
// tutorial (tf.distribute.MirroredStrategy) on Fashion-MNIST, with troupe.
//
// What it shows:
//   - MirroredStrategy on the local devices (every GPU, else cpu:0 and cpu:1):
//     one replica per device, gradients all-reduced every step;
//   - the global batch = 64 per replica x replicas (BUFFER/BATCH_SIZE_PER_REPLICA
//     in the tutorial);
//   - Keras-style callbacks: a metrics log (CsvLogger), a checkpoint each
//     epoch (config.checkpoint_dir), the learning rate 1e-3, 1e-4 from epoch 3,
//     1e-5 from epoch 7 (the tutorial's `decay`, here the schedule
//     "piecewise:3=1e-4,7=1e-5", epochs counted from 0), and PrintLR;
//   - evaluation from the latest checkpoint (tf.train.latest_checkpoint);
//   - saving the model, reloading it WITHOUT any strategy and evaluating it:
//     the same accuracy (the example fails if they differ).
//
// How to run (from the build directory's parent):
//   build/examples/mirrored_fashion_mnist                      # 12 epochs of the CNN (the tutorial)
//   build/examples/mirrored_fashion_mnist --short              # 8 short epochs on a 2048-example subset: seconds
//   build/examples/mirrored_fashion_mnist --devices cpu:0,cpu:1 --epochs 3 --dir runs/m
// It writes DIR/metrics.csv, DIR/training_checkpoints/ckpt-*.troupe and DIR/saved_model.troupe.
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>

#include <troupe/troupe.hpp>

#include "args.hpp"

int main(int argc, char** argv) {
  examples::Args args(argc, argv,
                      "mirrored_fashion_mnist: the MirroredStrategy tutorial (fit with callbacks, checkpoints, "
                      "LR schedule, save / reload / evaluate) on Fashion-MNIST");
  args.option("--devices", "", "devices, e.g. cpu:0,cpu:1 or cuda:0,cuda:1 (default: every GPU, else 2 CPU devices)");
  args.option("--model", "cnn", "zoo model (mlp, cnn) or a model spec file");
  args.option("--epochs", "12", "epochs (the tutorial: 12)");
  args.option("--batch", "64", "examples per replica and step (global batch = this x replicas)");
  args.option("--dir", "runs/mirrored_fashion_mnist", "output directory (metrics, checkpoints, saved model)");
  args.option("--seed", "0", "seed of initialisation and shuffling");
  args.flag("--short", "8 epochs on a 2048-example subset (1000 test examples): runs in seconds");
  args.parse();
  const long long epochs = args.integer("--epochs", 1, 1000);
  const long long batch = args.integer("--batch", 1, 65536);
  const long long seed = args.integer("--seed", 0, (1LL << 62));
  const bool short_run = args.has("--short");
  if (short_run && args.has("--epochs")) args.fail("--short chooses the epochs itself; drop --epochs");
  const std::string dir = args.str("--dir");
  if (dir.empty()) args.fail("--dir must not be empty");

  try {
    std::vector<troupe::Device> devices;
    try {
      if (!args.str("--devices").empty()) devices = troupe::parse_devices(args.str("--devices"));
    } catch (const std::exception& e) {
      args.fail(e.what());
    }
    troupe::MirroredStrategy strategy(devices);
    std::printf("Number of devices: %d (", strategy.num_replicas_in_sync());
    for (const auto& d : strategy.devices()) std::printf(" %s", d.str().c_str());
    std::printf(" )\n");

    std::filesystem::create_directories(dir);
    troupe::FitConfig config;
    config.model = args.str("--model");
    config.data = "fashion-mnist";
    config.epochs = epochs;
    config.batch = batch;  // per replica
    config.seed = static_cast<std::uint64_t>(seed);
    config.optimizer.name = "adam";
    config.lr = 1e-3f;
    // The tutorial's decay(epoch): 1e-3 for epochs 0-2, 1e-4 for 3-6, 1e-5 after.
    config.schedule = "piecewise:3=1e-4,7=1e-5";
    config.checkpoint_dir = dir + "/training_checkpoints";  // a checkpoint each epoch
    config.keep_last = 0;                                   // keep them all, as the tutorial
    if (short_run) {
      // A small subset as an IDX directory, so that 8 epochs (all three
      // learning rates) take seconds.
      config.data = troupe::write_idx_subset(troupe::load_data("fashion-mnist"), dir + "/subset", 2048, 1000);
      config.epochs = 8;
      std::filesystem::remove_all(config.checkpoint_dir);  // a fresh run each time
    }
    const long long global_batch = batch * strategy.num_replicas_in_sync();
    std::printf("batch: %lld per replica x %d replicas = %lld global\n", batch, strategy.num_replicas_in_sync(),
                global_batch);

    troupe::CallbackList callbacks = {
        std::make_shared<troupe::CsvLogger>(dir + "/metrics.csv"),  // tf.keras.callbacks.CSVLogger / TensorBoard
        std::make_shared<troupe::ProgressLogger>(),
        std::make_shared<troupe::PrintLR>(),
    };
    troupe::History history = strategy.fit(config, callbacks);
    std::printf("fit: %lld steps in %.1f s, %.0f samples/s; test accuracy %.4f\n",
                static_cast<long long>(history.steps), history.wall_seconds, history.samples_per_s,
                history.final.test_accuracy);

    // model.load_weights(tf.train.latest_checkpoint(checkpoint_dir)); model.evaluate(eval_dataset)
    const troupe::Splits data = troupe::load_data(config.data);
    const auto latest = troupe::latest_checkpoint(config.checkpoint_dir);
    if (!latest) throw std::runtime_error("no checkpoint in " + config.checkpoint_dir);
    auto from_checkpoint = troupe::load_model(*latest);
    const troupe::EpochResult ckpt_eval = troupe::evaluate(*from_checkpoint, data.test);
    std::printf("Latest checkpoint %s: Eval loss: %.4f, Eval accuracy: %.4f\n", latest->c_str(), ckpt_eval.test_loss,
                ckpt_eval.test_accuracy);

    // model.save(path); tf.keras.models.load_model(path) without a strategy; evaluate.
    const std::string saved = dir + "/saved_model.troupe";
    troupe::save_model(*history.model, saved);
    auto reloaded = troupe::load_model(saved, troupe::Device::cpu());
    const troupe::EpochResult reloaded_eval = troupe::evaluate(*reloaded, data.test);
    std::printf("Saved model %s reloaded without a strategy: Eval loss: %.4f, Eval accuracy: %.4f\n", saved.c_str(),
                reloaded_eval.test_loss, reloaded_eval.test_accuracy);

    // The last checkpoint is written at the last epoch end, from the state
    // fit() ended with: all three evaluations are of the same parameters.
    const bool same =
        reloaded_eval.test_accuracy == history.final.test_accuracy &&
        ckpt_eval.test_accuracy == history.final.test_accuracy &&
        std::abs(reloaded_eval.test_loss - history.final.test_loss) <= 1e-5 * (1 + history.final.test_loss);
    if (!same) {
      std::fprintf(stderr, "error: accuracies differ: fit %.6f, latest checkpoint %.6f, reloaded %.6f\n",
                   history.final.test_accuracy, ckpt_eval.test_accuracy, reloaded_eval.test_accuracy);
      return 1;
    }
    std::printf("same accuracy after fit, from the latest checkpoint and after reloading: %.4f\n",
                reloaded_eval.test_accuracy);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
