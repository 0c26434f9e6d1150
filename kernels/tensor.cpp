#include "kernels/tensor.hpp"

#include <stdexcept>

#include "kernels/registry.hpp"

namespace troupe::kernels {

namespace {
Backend& memory_backend(const Device& device) { return Registry::instance().for_device(device); }
}  // namespace

const char* to_string(DType dtype) { return dtype == DType::f32 ? "f32" : "i32"; }

// ---- Shape ----

Shape::Shape(std::initializer_list<std::int64_t> dims) : Shape(std::vector<std::int64_t>(dims)) {}

Shape::Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {
  bool empty = false;
  for (auto d : dims_) {
    if (d < 0) throw std::invalid_argument("Shape: negative dimension in " + str());
    empty = empty || d == 0;
  }
  if (empty) return;
  std::int64_t n = 1;
  for (auto d : dims_) {
    if (n > kMaxElements / d)
      throw std::invalid_argument("Shape " + str() + " has more than 2^56 elements (the most a tensor may have)");
    n *= d;
  }
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (auto d : dims_) n *= d;
  return n;
}

std::string Shape::str() const {
  std::string out = "[";
  for (std::size_t i = 0; i < dims_.size(); ++i) out += (i ? ", " : "") + std::to_string(dims_[i]);
  return out + "]";
}

// ---- Storage ----

Storage::Storage(Device device, std::size_t bytes)
    : device_(device), bytes_(bytes), data_(memory_backend(device).allocate(bytes, device.index)) {}

Storage::~Storage() { memory_backend(device_).deallocate(data_, device_.index); }

// ---- Tensor ----

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  auto storage = std::make_shared<Storage>(device, static_cast<std::size_t>(shape.numel()) * element_size(dtype));
  void* data = storage->data();
  return Tensor(std::move(storage), data, shape, dtype, device);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  Backend& b = memory_backend(device);
  if (dtype == DType::f32)
    b.fill(static_cast<std::size_t>(t.numel()), 0.0f, t.f32());
  else
    b.fill_i32(static_cast<std::size_t>(t.numel()), 0, t.i32());
  return t;
}

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, DType::f32, device);
  memory_backend(device).fill(static_cast<std::size_t>(t.numel()), value, t.f32());
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  if (static_cast<std::int64_t>(values.size()) != shape.numel())
    throw std::invalid_argument("Tensor::from_vector: " + std::to_string(values.size()) + " values for shape " +
                                shape.str());
  Tensor t = empty(shape, DType::f32);
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<std::int32_t>& values) {
  if (static_cast<std::int64_t>(values.size()) != shape.numel())
    throw std::invalid_argument("Tensor::from_vector: " + std::to_string(values.size()) + " values for shape " +
                                shape.str());
  Tensor t = empty(shape, DType::i32);
  std::copy(values.begin(), values.end(), t.i32());
  return t;
}

Tensor Tensor::view(void* data, const Shape& shape, DType dtype, Device device) {
  if (!data && shape.numel() != 0) throw std::invalid_argument("Tensor::view: null data for shape " + shape.str());
  return Tensor(nullptr, data, shape, dtype, device);
}

Tensor Tensor::slice(std::int64_t offset, const Shape& shape) const {
  if (offset < 0 || offset + shape.numel() > numel())
    throw std::out_of_range("Tensor::slice: " + std::to_string(shape.numel()) + " elements at offset " +
                            std::to_string(offset) + " of " + describe());
  char* base = static_cast<char*>(data_) + offset * static_cast<std::int64_t>(element_size(dtype_));
  return Tensor(storage_, base, shape, dtype_, device_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (shape.numel() != numel())
    throw std::invalid_argument("Tensor::reshape: " + describe() + " cannot become " + shape.str());
  return Tensor(storage_, data_, shape, dtype_, device_);
}

Tensor Tensor::to(Device device) const {
  Tensor out = empty(shape_, dtype_, device);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& source) const {
  if (source.shape_ != shape_ || source.dtype_ != dtype_)
    throw std::invalid_argument("Tensor::copy_from: " + source.describe() + " into " + describe());
  const std::size_t n = bytes();
  if (n == 0) return;
  if (device_.same_memory(source.device_)) {
    memory_backend(device_).copy_on_device(data_, source.data_, n, device_.index);
  } else if (source.device_.is_cpu()) {
    memory_backend(device_).copy_from_host(data_, source.data_, n, device_.index);
  } else if (device_.is_cpu()) {
    memory_backend(source.device_).copy_to_host(data_, source.data_, n, source.device_.index);
  } else {
    // GPU to another GPU: stage through the host. Peer copies belong to the
    // collective backends (net/), which own streams and peer access.
    Tensor staged = source.to(Device::cpu());
    copy_from(staged);
  }
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  Tensor host = Tensor::view(out.data(), shape_, DType::f32, Device::cpu());
  host.copy_from(*this);
  return out;
}

std::vector<std::int32_t> Tensor::to_int_vector() const {
  std::vector<std::int32_t> out(static_cast<std::size_t>(numel()));
  Tensor host = Tensor::view(out.data(), shape_, DType::i32, Device::cpu());
  host.copy_from(*this);
  return out;
}

float* Tensor::f32() const {
  if (dtype_ != DType::f32) throw std::invalid_argument("Tensor::f32() on " + describe());
  return static_cast<float*>(data_);
}

std::int32_t* Tensor::i32() const {
  if (dtype_ != DType::i32) throw std::invalid_argument("Tensor::i32() on " + describe());
  return static_cast<std::int32_t*>(data_);
}

std::string Tensor::describe() const { return std::string(to_string(dtype_)) + shape_.str() + " on " + device_.str(); }

}  // namespace troupe::kernels
