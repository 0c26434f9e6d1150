// warm_up_device: a GPU's libraries load before a job's clock starts.
//
// cuBLAS and cuDNN create their handles and choose their algorithms, and
// CUDA loads each kernel the model uses (lazily, at its first launch), the
// first time a model runs on a GPU. Left to the first training step, that
// took 0.3 to 0.7 s of a 0.2 to 0.4 s epoch (an H100, the cnn at batch 512;
// docs/BENCHMARKS.md), which the PyTorch anchor we compare against leaves
// out of its figure with a warm-up step on a throwaway model. This is the
// same warm-up for troupe: a throwaway copy of the model, one forward and
// backward on a zero batch of the training batch size and one inference
// forward of the evaluation batch. The job's parameters, optimizer state
// and random streams are not touched. Nothing on a CPU device (its
// libraries have no start-up cost worth moving).
#pragma once

#include <cstdint>

#include "kernels/device.hpp"
#include "models/spec.hpp"

namespace troupe::models {

// What warm_up_device did. A failure is left to the caller's own model,
// which meets it again at its first step and reports it where the job
// reports errors: nothing is thrown.
enum class WarmUp { not_a_gpu, already_warm, warmed, failed };

// Once per device, model and batch sizes in a process: a second replica of
// the same model on the same device finds it already warm.
WarmUp warm_up_device(const ModelSpec& spec, kernels::Device device, std::int64_t batch, std::int64_t eval_batch,
                      bool regression);

}  // namespace troupe::models
