// Shape: the extent of each dimension. Small shapes (rank <= 6) live inline, so creating one
// costs no allocation on the hot path of an op.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace kiln {

namespace detail {

// A vector of int64 with inline storage for up to kInline values.
class DimVector {
 public:
  static constexpr std::size_t kInline = 6;

  DimVector() = default;
  explicit DimVector(std::size_t size, std::int64_t value = 0) { resize(size, value); }
  DimVector(std::initializer_list<std::int64_t> values) { assign(values.begin(), values.size()); }
  explicit DimVector(std::span<const std::int64_t> values) { assign(values.data(), values.size()); }
  DimVector(const DimVector& other) { copy_from(other); }
  DimVector& operator=(const DimVector& other) {
    if (this != &other) copy_from(other);
    return *this;
  }
  DimVector(DimVector&& other) noexcept { *this = std::move(other); }
  DimVector& operator=(DimVector&& other) noexcept {
    if (this != &other) {
      size_ = other.size_;
      heap_ = std::move(other.heap_);
      std::copy_n(other.inline_, kInline, inline_);
      other.size_ = 0;
    }
    return *this;
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::int64_t* data() noexcept { return size_ <= kInline ? inline_ : heap_.data(); }
  const std::int64_t* data() const noexcept { return size_ <= kInline ? inline_ : heap_.data(); }
  std::int64_t& operator[](std::size_t i) noexcept { return data()[i]; }
  std::int64_t operator[](std::size_t i) const noexcept { return data()[i]; }
  std::int64_t* begin() noexcept { return data(); }
  std::int64_t* end() noexcept { return data() + size_; }
  const std::int64_t* begin() const noexcept { return data(); }
  const std::int64_t* end() const noexcept { return data() + size_; }
  std::int64_t& back() noexcept { return data()[size_ - 1]; }
  std::int64_t back() const noexcept { return data()[size_ - 1]; }

  void resize(std::size_t size, std::int64_t value = 0) {
    if (size <= kInline) {
      if (size_ > kInline) std::copy_n(heap_.data(), size, inline_);
      for (std::size_t i = size_; i < size; ++i) inline_[i] = value;
      heap_.clear();
    } else {
      if (size_ <= kInline) heap_.assign(inline_, inline_ + size_);
      heap_.resize(size, value);
    }
    size_ = size;
  }
  void push_back(std::int64_t value) {
    resize(size_ + 1);
    back() = value;
  }
  void insert(std::size_t position, std::int64_t value) {
    resize(size_ + 1);
    std::int64_t* d = data();
    for (std::size_t i = size_ - 1; i > position; --i) d[i] = d[i - 1];
    d[position] = value;
  }
  void erase(std::size_t position) {
    std::int64_t* d = data();
    for (std::size_t i = position; i + 1 < size_; ++i) d[i] = d[i + 1];
    resize(size_ - 1);
  }
  std::span<const std::int64_t> span() const noexcept { return {data(), size_}; }
  bool operator==(const DimVector& other) const noexcept {
    if (size_ != other.size_) return false;
    const std::int64_t* a = data();
    const std::int64_t* b = other.data();
    for (std::size_t i = 0; i < size_; ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }

 private:
  void copy_from(const DimVector& other) {
    if (other.size_ <= kInline) {  // the common case: no heap, one fixed-size copy
      heap_.clear();
      std::copy_n(other.inline_, kInline, inline_);
      size_ = other.size_;
    } else {
      assign(other.data(), other.size());
    }
  }
  void assign(const std::int64_t* values, std::size_t size) {
    resize(size);
    std::copy_n(values, size, data());
  }

  std::size_t size_ = 0;
  std::int64_t inline_[kInline] = {};
  std::vector<std::int64_t> heap_;
};

}  // namespace detail

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit Shape(std::span<const std::int64_t> dims) : dims_(dims) {}
  explicit Shape(const std::vector<std::int64_t>& dims) : dims_(std::span(dims)) {}
  explicit Shape(detail::DimVector dims) : dims_(std::move(dims)) {}

  std::size_t rank() const noexcept { return dims_.size(); }
  std::int64_t operator[](std::size_t i) const noexcept { return dims_[i]; }
  std::int64_t& operator[](std::size_t i) noexcept { return dims_[i]; }
  std::span<const std::int64_t> dims() const noexcept { return dims_.span(); }
  std::vector<std::int64_t> to_vector() const { return {dims_.begin(), dims_.end()}; }
  // The product of the dims. Every tensor's shape is checked to keep this product within 2^48;
  // for an arbitrary Shape value it wraps (in unsigned arithmetic, so never undefined).
  std::int64_t num_elements() const noexcept {
    std::uint64_t n = 1;
    for (std::int64_t d : dims_) n *= static_cast<std::uint64_t>(d);
    return static_cast<std::int64_t>(n);
  }
  bool operator==(const Shape& other) const noexcept { return dims_ == other.dims_; }
  const detail::DimVector& vector() const noexcept { return dims_; }
  detail::DimVector& vector() noexcept { return dims_; }
  std::string to_string() const;

 private:
  detail::DimVector dims_;
};

std::ostream& operator<<(std::ostream& out, const Shape& shape);

}  // namespace kiln
