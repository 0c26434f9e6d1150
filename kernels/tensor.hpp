// Tensor: a contiguous, row-major block of elements on one device.
//
// A Tensor either owns its storage (shared, reference counted, freed by the
// backend of its device when the last owner goes) or is a view into storage
// owned elsewhere. Views are how a model's layers see their parameters: the
// model owns ONE flat parameter buffer and every layer's weight is a view of
// a slice of it (DESIGN.md, "One flat buffer per model").
//
// Copying a Tensor object copies the handle, never the elements. Moving
// elements between devices is always an explicit call (to(), copy_from()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device.hpp"

namespace troupe::kernels {

// Element types. Only f32 is used for math today; i32 carries labels, token
// ids and pooling argmax indices. bf16/f16 would be added here, with their
// element size below.
enum class DType : std::uint8_t { f32, i32 };

const char* to_string(DType dtype);
inline std::size_t element_size(DType) { return 4; }

class Shape {
 public:
  // The most elements a shape may have: 2^56 (256 Pi floats, beyond any
  // device), so that numel(), and numel() times an element size, never
  // overflow. A shape of more throws std::invalid_argument (a model spec's
  // `dense units=10000000000000000` must be an error, not an overflow).
  static constexpr std::int64_t kMaxElements = std::int64_t{1} << 56;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::vector<std::int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  std::int64_t operator[](int i) const { return dims_.at(static_cast<std::size_t>(i)); }
  std::int64_t numel() const;
  const std::vector<std::int64_t>& dims() const { return dims_; }
  std::string str() const;  // "[64, 1, 28, 28]"

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  std::vector<std::int64_t> dims_;
};

// Device memory owned by one allocation. Allocated and freed by the backend
// registered for the device (see registry.hpp).
class Storage {
 public:
  Storage(Device device, std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  std::size_t bytes_;
  void* data_;
};

class Tensor {
 public:
  Tensor() = default;

  // New owning tensors. empty() leaves the elements uninitialised.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());
  // Host tensors from values (tests, small constants).
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  static Tensor from_vector(const Shape& shape, const std::vector<std::int32_t>& values);

  // A non-owning view of memory the caller keeps alive.
  static Tensor view(void* data, const Shape& shape, DType dtype, Device device);

  // A view of `shape` starting `offset` elements into this tensor; shares
  // (and keeps alive) this tensor's storage if it owns one.
  Tensor slice(std::int64_t offset, const Shape& shape) const;
  // The same elements with another shape of equal numel.
  Tensor reshape(const Shape& shape) const;

  // Explicit copies.
  Tensor to(Device device) const;              // new owning tensor on `device`
  void copy_from(const Tensor& source) const;  // same shape and dtype, any devices
  Tensor clone() const { return to(device_); }
  std::vector<float> to_vector() const;             // f32 elements, copied to host
  std::vector<std::int32_t> to_int_vector() const;  // i32 elements, copied to host

  bool defined() const { return data_ != nullptr || shape_.numel() == 0; }
  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return shape_.numel(); }
  int rank() const { return shape_.rank(); }
  std::int64_t size(int dim) const { return shape_[dim]; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * element_size(dtype_); }
  bool owns_storage() const { return storage_ != nullptr; }

  // Typed element pointers; they check the dtype and throw on a mismatch.
  // A Tensor is a handle (like a pointer), so a const handle still gives
  // write access to the elements: ops take outputs as `const Tensor&` and
  // accept temporaries such as `params.slice(...)`.
  float* f32() const;
  std::int32_t* i32() const;
  void* raw() const { return data_; }

  // "f32[64, 10] on cpu:0", for error messages.
  std::string describe() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, void* data, Shape shape, DType dtype, Device device)
      : storage_(std::move(storage)), data_(data), shape_(std::move(shape)), dtype_(dtype), device_(device) {}

  std::shared_ptr<Storage> storage_;  // null for views of foreign memory
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_;
};

}  // namespace troupe::kernels
