// model_parallel: the seed's two-headed model with its heads on different
// devices and their outputs concatenated, trained end to end on Fashion-MNIST.
//
//                      image [1, 28, 28]
//                ,-------------'-------------.
//   head A on device A              head B on device B             (at the same time,
//   flatten, dense 128, relu        conv 16x3x3, relu, pool 2,      one thread each)
//                |                  flatten, dense 64, relu
//                |                            |  (copied to device A when B's memory is elsewhere)
//                `----- concat [b, 128 + 64] -'  on device A
//                       dense 10 (the top, written with kernels ops) -> softmax cross-entropy
//
// What it shows: model parallelism with the public API's pieces. Each head
// is a troupe::Model (a Sequential stack with its own flat parameter and
// gradient buffers and its own optimizer); the concatenation and the top
// layer are written with troupe::ops (gemm, bias_add, transpose_last2), and
// backward sends each head its slice of the concatenation's gradient.
// Devices: cuda:0 and cuda:1 when there are two GPUs, cuda:0 and cpu:0 with
// one, else cpu:0 and cpu:1.
//
// Before training it checks the gradient: (1) against the same model on one
// device (same seeds, same batch): loss and every gradient must match;
// (2) against finite differences of the loss for parameters of each head and
// the top. Then it trains and prints the loss falling and the test accuracy.
//
// How to run:
//   build/examples/model_parallel                          # 2 epochs
//   build/examples/model_parallel --short                  # the checks and 60 steps: seconds
//   build/examples/model_parallel --devices cpu:0,cpu:1 --epochs 1
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <thread>

#include <troupe/troupe.hpp>

#include "args.hpp"
#include "kernels/registry.hpp"
#include "models/loss.hpp"

namespace {

using troupe::Device;
using troupe::Shape;
using troupe::Tensor;
namespace ops = troupe::ops;

const char* kHeadA = "name head_a\ninput 1 28 28\nflatten\ndense units=128\nrelu\n";
const char* kHeadB =
    "name head_b\ninput 1 28 28\nconv2d filters=16 kernel=3\nrelu\nmaxpool2d pool=2\nflatten\ndense units=64\nrelu\n";
constexpr std::int64_t kA = 128, kB = 64, kClasses = 10;

void make_current(const Device& d) {
  // The cuda ops run on the calling thread's current GPU.
  if (d.is_cuda()) troupe::kernels::Registry::instance().for_device(d).synchronize(d.index);
}

struct TwoHeaded {
  Device a, b;
  troupe::Model head_a, head_b;
  Tensor top_params, top_grads, w, bias, dw, dbias;  // the top dense layer, on device A
  std::unique_ptr<troupe::models::Optimizer> opt_a, opt_b, opt_top;
  troupe::models::Loss loss{troupe::models::LossKind::sparse_categorical_crossentropy};
  Tensor xa, xb, ya, hb_on_a, cat_t, cat, logits, dlogits, dcat, dcat_t, dha, dhb_on_a, dhb;

  TwoHeaded(Device da, Device db, std::uint64_t seed)
      : a(da),
        b(db),
        head_a(troupe::ModelSpec::parse(kHeadA, "head_a"), da),
        head_b(troupe::ModelSpec::parse(kHeadB, "head_b"), db) {
    head_a.initialize(seed);
    head_b.initialize(seed + 1);
    const std::int64_t n = (kA + kB) * kClasses + kClasses;
    top_params = Tensor::zeros({n}, troupe::kernels::DType::f32, a);
    top_grads = Tensor::zeros({n}, troupe::kernels::DType::f32, a);
    w = top_params.slice(0, {kA + kB, kClasses});
    bias = top_params.slice((kA + kB) * kClasses, {kClasses});
    dw = top_grads.slice(0, {kA + kB, kClasses});
    dbias = top_grads.slice((kA + kB) * kClasses, {kClasses});
    ops::glorot_uniform(w, kA + kB, kClasses, seed + 2);
    troupe::OptimizerConfig adam;
    adam.name = "adam";
    opt_a = troupe::models::make_optimizer(adam, head_a.parameters(), head_a.decayed_ranges());
    opt_b = troupe::models::make_optimizer(adam, head_b.parameters(), head_b.decayed_ranges());
    // The top layer's kernel w decays, its bias does not.
    opt_top = troupe::models::make_optimizer(adam, top_params, {{0, (kA + kB) * kClasses}});
  }

  void buffers(std::int64_t n) {
    if (cat.defined() && cat.size(0) == n) return;
    const auto f32 = troupe::kernels::DType::f32;
    hb_on_a = Tensor::empty({n, kB}, f32, a);
    cat_t = Tensor::empty({kA + kB, n}, f32, a);
    cat = Tensor::empty({n, kA + kB}, f32, a);
    dlogits = Tensor::empty({n, kClasses}, f32, a);
    logits = Tensor::empty({n, kClasses}, f32, a);
    dcat = Tensor::empty({n, kA + kB}, f32, a);
    dcat_t = Tensor::empty({kA + kB, n}, f32, a);
    dha = Tensor::empty({n, kA}, f32, a);
    dhb_on_a = Tensor::empty({n, kB}, f32, a);
    dhb = Tensor::empty({n, kB}, f32, b);
  }

  // Forward on both heads at once, concat, top, loss (mean over the batch).
  // With `backward`, fills every gradient buffer. x, y: host tensors.
  double step(const Tensor& x, const Tensor& y, bool backward, bool training = true) {
    const std::int64_t n = x.size(0);
    buffers(n);
    Tensor stage_a, stage_b, stage_y;
    const Tensor& x_a = troupe::models::on_device(x, stage_a, a);
    const Tensor& x_b = troupe::models::on_device(x, stage_b, b);
    const Tensor& y_a = troupe::models::on_device(y, stage_y, a);

    // Head B on its own thread (its device), head A here: model parallelism.
    std::exception_ptr b_error;
    std::thread head_b_thread([&] {
      try {
        make_current(b);
        const Tensor& hb = head_b.forward(x_b, training);
        hb_on_a.copy_from(hb);  // device B -> device A (a plain copy on the host)
      } catch (...) {
        b_error = std::current_exception();
      }
    });
    make_current(a);
    const Tensor& ha = head_a.forward(x_a, training);
    head_b_thread.join();
    if (b_error) std::rethrow_exception(b_error);

    // concat along features: transpose both into the rows of cat_t
    // ([128 + 64, n], so each head's part is contiguous), transpose back.
    ops::transpose_last2(ha, cat_t.slice(0, {kA, n}));
    ops::transpose_last2(hb_on_a, cat_t.slice(kA * n, {kB, n}));
    ops::transpose_last2(cat_t, cat);
    // top: logits = cat . W + bias
    ops::gemm(cat, w, logits);
    ops::bias_add(logits, bias);
    const double loss_sum = loss.sum(logits, y_a, backward ? dlogits : Tensor(), 1.0f / static_cast<float>(n));
    if (!backward) return loss_sum / double(n);

    // top backward: dW = cat^T . dlogits, dbias = sum dlogits, dcat = dlogits . W^T
    ops::gemm(cat, dlogits, dw, /*trans_a=*/true);
    ops::bias_grad(dlogits, dbias);
    ops::gemm(dlogits, w, dcat, false, /*trans_b=*/true);
    // split dcat into the heads' output gradients (the concat's backward)
    ops::transpose_last2(dcat, dcat_t);
    ops::transpose_last2(dcat_t.slice(0, {kA, n}), dha);
    ops::transpose_last2(dcat_t.slice(kA * n, {kB, n}), dhb_on_a);
    dhb.copy_from(dhb_on_a);  // device A -> device B
    std::thread head_b_back([&] {
      try {
        make_current(b);
        head_b.backward(dhb);
      } catch (...) {
        b_error = std::current_exception();
      }
    });
    make_current(a);
    head_a.backward(dha);
    head_b_back.join();
    if (b_error) std::rethrow_exception(b_error);
    return loss_sum / double(n);
  }

  void apply(float lr) {
    opt_a->step(head_a.parameters(), head_a.gradients(), lr);
    opt_b->step(head_b.parameters(), head_b.gradients(), lr);
    opt_top->step(top_params, top_grads, lr);
  }

  double accuracy(const troupe::Dataset& test) {
    std::int64_t correct = 0;
    const std::int64_t b = 500;
    Tensor xh = test.make_feature_batch(b), yh = test.make_label_batch(b);
    for (std::int64_t start = 0; start < test.size(); start += b) {
      std::vector<std::int64_t> idx;
      for (std::int64_t i = start; i < std::min(start + b, test.size()); ++i) idx.push_back(i);
      const std::int64_t n = test.gather(idx, xh, yh);
      const Tensor x = xh.slice(0, troupe::models::batched(n, test.feature_shape()));
      step(x, yh.slice(0, {n}), /*backward=*/false, /*training=*/false);
      const std::vector<float> l = logits.to_vector();
      const auto* labels = static_cast<const std::int32_t*>(yh.raw());
      for (std::int64_t i = 0; i < n; ++i) {
        std::int64_t best = 0;
        for (std::int64_t c = 1; c < kClasses; ++c)
          if (l[static_cast<std::size_t>(i * kClasses + c)] > l[static_cast<std::size_t>(i * kClasses + best)])
            best = c;
        correct += best == labels[i];
      }
    }
    return double(correct) / double(test.size());
  }
};

double max_abs_diff(const Tensor& x, const Tensor& y) {
  const std::vector<float> a = x.to_vector(), b = y.to_vector();
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

// d loss / d params[i] by central differences, against the analytic value.
double fd_relative_error(TwoHeaded& m, const Tensor& params, const Tensor& grads, std::int64_t i, const Tensor& x,
                         const Tensor& y) {
  m.step(x, y, true);
  const double analytic = grads.slice(i, {1}).to_vector()[0];
  const Tensor p = params.slice(i, {1});
  const float original = p.to_vector()[0];
  const float eps = 3e-3f;
  p.copy_from(Tensor::from_vector({1}, std::vector<float>{original + eps}));
  const double up = m.step(x, y, false);
  p.copy_from(Tensor::from_vector({1}, std::vector<float>{original - eps}));
  const double down = m.step(x, y, false);
  p.copy_from(Tensor::from_vector({1}, std::vector<float>{original}));
  const double numeric = (up - down) / (2.0 * eps);
  return std::abs(numeric - analytic) / std::max({std::abs(numeric), std::abs(analytic), 1e-3});
}

}  // namespace

int main(int argc, char** argv) {
  examples::Args args(argc, argv,
                      "model_parallel: a two-headed model, one head per device, outputs concatenated, trained end to "
                      "end on Fashion-MNIST (gradient checked first)");
  args.option("--devices", "", "two devices A,B (default: cuda:0,cuda:1 / cuda:0,cpu:0 / cpu:0,cpu:1)");
  args.option("--epochs", "2", "epochs");
  args.option("--batch", "64", "examples per step");
  args.option("--lr", "0.001", "Adam's learning rate");
  args.option("--seed", "0", "seed of initialisation and shuffling");
  args.flag("--short", "the gradient checks and 60 training steps, evaluated on 1000 test examples");
  args.parse();
  const long long epochs = args.integer("--epochs", 1, 1000);
  const long long batch = args.integer("--batch", 2, 65536);
  const float lr = static_cast<float>(args.real("--lr", 1e-9, 10.0));
  const long long seed = args.integer("--seed", 0, 1LL << 62);
  const bool short_run = args.has("--short");
  if (short_run && args.has("--epochs")) args.fail("--short chooses the length itself; drop --epochs");

  std::vector<Device> devices;
  try {
    if (!args.str("--devices").empty()) {
      devices = troupe::parse_devices(args.str("--devices"));
    } else {
      const int gpus = troupe::cuda_device_count();
      devices = gpus >= 2   ? std::vector<Device>{Device::cuda(0), Device::cuda(1)}
                : gpus == 1 ? std::vector<Device>{Device::cuda(0), Device::cpu(0)}
                            : std::vector<Device>{Device::cpu(0), Device::cpu(1)};
    }
  } catch (const std::exception& e) {
    args.fail(e.what());
  }
  if (devices.size() != 2) args.fail("--devices must name exactly 2 devices (head A's, head B's)");
  for (const auto& d : devices)
    if (d.is_cuda() && d.index >= troupe::cuda_device_count())
      args.fail("--devices: " + d.str() + " requested, but this machine has " +
                std::to_string(troupe::cuda_device_count()) + " CUDA device(s)");

  try {
    troupe::Splits data = troupe::load_data("fashion-mnist");
    if (short_run) {
      std::vector<std::int64_t> first(1000);
      for (std::int64_t i = 0; i < 1000; ++i) first[static_cast<std::size_t>(i)] = i;
      data.test = troupe::data::select_examples(data.test, first, "test");
    }
    const auto useed = static_cast<std::uint64_t>(seed);
    TwoHeaded model(devices[0], devices[1], useed);
    std::printf("head A on %s:\n%shead B on %s:\n%stop (concat %lld + %lld -> dense %lld) on %s\n",
                devices[0].str().c_str(), model.head_a.summary().c_str(), devices[1].str().c_str(),
                model.head_b.summary().c_str(), static_cast<long long>(kA), static_cast<long long>(kB),
                static_cast<long long>(kClasses), devices[0].str().c_str());

    // One batch for the checks.
    const std::int64_t check_n = 32;
    Tensor xh = data.train.make_feature_batch(check_n), yh = data.train.make_label_batch(check_n);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(check_n));
    for (std::int64_t i = 0; i < check_n; ++i) idx[static_cast<std::size_t>(i)] = i;
    data.train.gather(idx, xh, yh);

    // (1) The same model on one device: same loss and gradients.
    TwoHeaded single(devices[0], devices[0], useed);
    const double loss_split = model.step(xh, yh, true), loss_single = single.step(xh, yh, true);
    const double diff = std::max({max_abs_diff(model.head_a.gradients(), single.head_a.gradients()),
                                  max_abs_diff(model.head_b.gradients(), single.head_b.gradients()),
                                  max_abs_diff(model.top_grads, single.top_grads)});
    std::printf("check 1, against one device (%s): loss %.6f vs %.6f, largest gradient difference %.3g\n",
                devices[0].str().c_str(), loss_split, loss_single, diff);
    if (std::abs(loss_split - loss_single) > 1e-4 || diff > 1e-4) {
      std::fprintf(stderr, "error: the two-device model's gradient differs from the one-device model's\n");
      return 1;
    }
    // (2) Finite differences, a few parameters of each part: pixels near the
    // image centre (the border is background, whose gradient is 0) and
    // dense weights and biases. (Convolution weights touch hundreds of
    // positions each, and float32 differences are too noisy for them; check
    // 1 and the kernels' own finite-difference tests cover them.)
    double worst = 0;
    for (std::int64_t i : {30000LL, 51205LL, 60000LL, 100400LL})
      worst = std::max(worst, fd_relative_error(model, model.head_a.parameters(), model.head_a.gradients(), i, xh, yh));
    for (std::int64_t i : {1000LL, 5000LL, 90000LL, 173230LL})
      worst = std::max(worst, fd_relative_error(model, model.head_b.parameters(), model.head_b.gradients(), i, xh, yh));
    for (std::int64_t i : {0LL, 500LL, 1500LL, 1925LL})
      worst = std::max(worst, fd_relative_error(model, model.top_params, model.top_grads, i, xh, yh));
    std::printf("check 2, finite differences on 12 parameters (heads and top): largest relative error %.3g\n", worst);
    if (worst > 1e-2) {
      std::fprintf(stderr, "error: the analytic gradient disagrees with finite differences (%.3g)\n", worst);
      return 1;
    }

    // Training.
    troupe::data::PlanOptions plan{data.train.size(), batch, true, useed, true};
    troupe::data::BatchIterator batches(plan, {0, 1});
    Tensor bx = data.train.make_feature_batch(batch), by = data.train.make_label_batch(batch);
    const std::int64_t per_epoch = batches.batches_per_epoch();
    const std::int64_t total = short_run ? 60 : per_epoch * epochs;
    const std::int64_t report = short_run ? 20 : 200;
    double window = 0, first_window = -1, last_window = 0;
    for (std::int64_t s = 1; s <= total; ++s) {
      const auto b = batches.next();
      data.train.gather(b.indices, bx, by);
      window += model.step(bx, by, true);
      model.apply(lr);
      if (s % report == 0) {
        last_window = window / double(report);
        if (first_window < 0) first_window = last_window;
        std::printf("step %lld  mean loss of the last %lld steps %.4f\n", static_cast<long long>(s),
                    static_cast<long long>(report), last_window);
        std::fflush(stdout);
        window = 0;
      }
      if (!short_run && s % per_epoch == 0)
        std::printf("epoch %lld  test accuracy %.4f\n", static_cast<long long>(s / per_epoch),
                    model.accuracy(data.test));
    }
    const double acc = model.accuracy(data.test);
    std::printf("model_parallel: %lld steps, loss %.4f -> %.4f, test accuracy %.4f (%lld test examples)\n",
                static_cast<long long>(total), first_window, last_window, acc,
                static_cast<long long>(data.test.size()));
    if (!(last_window < first_window)) {
      std::fprintf(stderr, "error: the loss did not decrease\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
