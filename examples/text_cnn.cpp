// text_cnn: the seed's Reuters text CNN, mirrored on 2 devices, on real text:
// WordNet glosses labelled by their lexicographer file (45 classes, much like
// Reuters-21578's 46 topics; Debian's wordnet-base, models/data/wordnet.hpp).
//
// What it shows:
//   - the zoo model `textcnn`: Embedding(V, 7) -> Conv1D(64, 5) ReLU ->
//     MaxPool1D(2) -> Conv1D(32, 3) ReLU -> MaxPool1D(2) -> Flatten -> Dense(45),
//     sequences of 300 token ids, a 10000-word vocabulary;
//   - trained with Nadam under MirroredStrategy on 2 devices (cpu:0, cpu:1,
//     or two GPUs), reporting accuracy and top-5 accuracy each epoch.
//
// How to run:
//   build/examples/text_cnn                       # 5 epochs on cpu:0,cpu:1 (or 2 GPUs)
//   build/examples/text_cnn --short               # 20 steps, evaluated on 2000 evenly spaced test glosses: seconds
//   build/examples/text_cnn --epochs 2 --batch 32 --devices cpu:0,cpu:1
#include <cstdio>
#include <exception>
#include <filesystem>

#include <troupe/troupe.hpp>

#include "args.hpp"

int main(int argc, char** argv) {
  examples::Args args(argc, argv,
                      "text_cnn: the Reuters-style text CNN (Embedding, Conv1D, MaxPool1D, Dense; Nadam; "
                      "accuracy and top-5) on WordNet glosses, mirrored on 2 devices");
  args.option("--devices", "", "exactly 2 devices (default: the first 2 GPUs, else cpu:0,cpu:1)");
  args.option("--epochs", "5", "epochs");
  args.option("--batch", "64", "examples per replica and step (global batch = this x 2)");
  args.option("--lr", "0.002", "Nadam's learning rate (Keras' default)");
  args.option("--seed", "0", "seed of initialisation and shuffling");
  args.flag("--short", "20 steps, then one evaluation on 2000 test glosses: runs in seconds");
  args.parse();
  const long long epochs = args.integer("--epochs", 1, 1000);
  const long long batch = args.integer("--batch", 1, 65536);
  const float lr = static_cast<float>(args.real("--lr", 1e-9, 10.0));
  const long long seed = args.integer("--seed", 0, 1LL << 62);
  const bool short_run = args.has("--short");
  if (short_run && args.has("--epochs")) args.fail("--short chooses the length itself; drop --epochs");

  try {
    std::vector<troupe::Device> devices;
    try {
      if (!args.str("--devices").empty()) {
        devices = troupe::parse_devices(args.str("--devices"));
      } else if (troupe::cuda_device_count() >= 2) {
        devices = {troupe::Device::cuda(0), troupe::Device::cuda(1)};
      } else {
        devices = {troupe::Device::cpu(0), troupe::Device::cpu(1)};
      }
    } catch (const std::exception& e) {
      args.fail(e.what());
    }
    if (devices.size() != 2) args.fail("--devices must name exactly 2 devices, got " + std::to_string(devices.size()));

    troupe::MirroredStrategy strategy(devices);
    troupe::FitConfig config;
    config.model = "textcnn";
    config.data = "wordnet";
    config.epochs = epochs;
    config.batch = batch;
    config.optimizer.name = "nadam";
    config.optimizer.epsilon = 1e-7f;  // Keras' Nadam
    config.lr = lr;
    config.seed = static_cast<std::uint64_t>(seed);
    if (short_run) {
      config.epochs = 1;
      config.max_steps = 20;
    }

    const troupe::Splits data = troupe::load_data("wordnet");
    const troupe::ModelSpec spec = troupe::model_spec("textcnn", data.train);
    std::printf("%s\n", data.train.describe().c_str());
    std::printf("%s", troupe::Model(spec, troupe::Device::cpu()).summary().c_str());
    std::printf("devices: %s, %s; batch %lld per replica, %lld global\n", devices[0].str().c_str(),
                devices[1].str().c_str(), batch, 2 * batch);

    troupe::History h = strategy.fit(config, {std::make_shared<troupe::ProgressLogger>(short_run ? 5 : 200)});

    // The final evaluation of fit() covers the whole test split; --short
    // evaluates the trained model on a part of it, to stay short.
    troupe::EpochResult final = h.final;
    if (short_run) {
      // Evenly spaced: the split is in file order, grouped by part of speech.
      const std::int64_t n = std::min<std::int64_t>(2000, data.test.size());
      std::vector<std::int64_t> spread(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) spread[static_cast<std::size_t>(i)] = i * data.test.size() / n;
      final = troupe::evaluate(*h.model, troupe::data::select_examples(data.test, spread, "test"));
    }
    std::printf(
        "text_cnn: %lld steps, %.0f samples/s; test accuracy %.4f, top-5 %.4f, loss %.4f (%lld test glosses; "
        "chance: %.4f)\n",
        static_cast<long long>(h.steps), h.samples_per_s, final.test_accuracy, final.test_top5, final.test_loss,
        static_cast<long long>(final.test_examples), 1.0 / data.train.num_classes);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
