#include "models/warm_up.hpp"

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kernels/registry.hpp"
#include "models/loss.hpp"
#include "models/model.hpp"

namespace troupe::models {

WarmUp warm_up_device(const ModelSpec& spec, kernels::Device device, std::int64_t batch, std::int64_t eval_batch,
                      bool regression) {
  if (!device.is_cuda()) return WarmUp::not_a_gpu;
  static std::mutex mutex;
  static std::set<std::string> warmed;  // device, batch sizes, model text
  std::lock_guard<std::mutex> lock(mutex);
  const std::string key = std::to_string(device.index) + " " + std::to_string(batch) + " " +
                          std::to_string(eval_batch) + " " + (regression ? "r " : "c ") + spec.text();
  if (!warmed.insert(key).second) return WarmUp::already_warm;
  try {
    Model model(spec, device);
    model.initialize(0);
    std::vector<std::int64_t> dims{batch};
    for (auto d : spec.input.dims()) dims.push_back(d);
    // Zeros are valid inputs for every model: token id 0 is in every vocabulary.
    const Tensor x = Tensor::zeros(kernels::Shape(dims), spec.input_dtype, device);
    const Tensor& out = model.forward(x, /*training=*/true);
    const Tensor target = regression ? Tensor::zeros(out.shape(), kernels::DType::f32, device)
                                     : Tensor::zeros({batch}, kernels::DType::i32, device);
    const Tensor dout = Tensor::empty(out.shape(), kernels::DType::f32, device);
    Loss loss(regression ? LossKind::mean_squared_error : LossKind::sparse_categorical_crossentropy);
    loss.sum(out, target, dout, 1.0f);
    model.backward(dout);
    if (eval_batch > 0) {
      dims[0] = eval_batch;
      model.forward(Tensor::zeros(kernels::Shape(dims), spec.input_dtype, device), /*training=*/false);
    }
    kernels::Registry::instance().for_device(device).synchronize(device.index);
    return WarmUp::warmed;
  } catch (const std::exception&) {
    // The caller builds the same model on the same device and reports what
    // went wrong there, with its own context (warm_up.hpp).
    return WarmUp::failed;
  }
}

}  // namespace troupe::models
