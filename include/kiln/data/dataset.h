// Datasets: a size and random access to items by index. Everything in kiln::data (views,
// loaders) works on any Dataset<Item>, shared through DatasetPtr.
//
//   struct Point { std::vector<float> x; std::int64_t y; };
//   data::DatasetPtr<Point> points = data::in_memory(std::vector<Point>{...});
//   Point third = points->get(2);           // InvalidArgument past the end
//
// A DataLoader calls get() from several worker threads at once, so get() must be safe to call
// concurrently; every dataset in kiln::data is (they are immutable once built).
#pragma once

#include <concepts>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::data {

template <class Item>
class Dataset {
 public:
  using item_type = Item;
  virtual ~Dataset() = default;
  virtual std::size_t size() const = 0;
  // The item at index (a copy); throws InvalidArgument unless index < size().
  virtual Item get(std::size_t index) const = 0;
};

template <class Item>
using DatasetPtr = std::shared_ptr<const Dataset<Item>>;

// A shared pointer to any Dataset subclass (the combinators accept one of these and deduce the
// item type from it, so a shared_ptr<InMemoryDataset<T>> works as well as a DatasetPtr<T>).
template <class D>
concept DatasetType = requires {
  typename std::remove_const_t<D>::item_type;
}
&&std::derived_from<std::remove_const_t<D>, Dataset<typename std::remove_const_t<D>::item_type>>;
template <class D>
using item_of = typename std::remove_const_t<D>::item_type;

namespace detail {
// Throws InvalidArgument "[op] index I is out of range for a dataset of N items".
void check_index(const char* op, std::size_t index, std::size_t size);
}  // namespace detail

// The items of a vector, held in memory.
template <class Item>
class InMemoryDataset final : public Dataset<Item> {
 public:
  explicit InMemoryDataset(std::vector<Item> items) : items_(std::move(items)) {}
  std::size_t size() const override { return items_.size(); }
  Item get(std::size_t index) const override {
    detail::check_index("InMemoryDataset::get", index, items_.size());
    return items_[index];
  }
  const std::vector<Item>& items() const noexcept { return items_; }

 private:
  std::vector<Item> items_;
};

template <class Item>
DatasetPtr<Item> in_memory(std::vector<Item> items) {
  return std::make_shared<const InMemoryDataset<Item>>(std::move(items));
}

// Reads every item once into memory: turns a lazy view (a map over a slow transform, a CSV
// re-read) into a dataset whose get() is a copy.
template <DatasetType D>
DatasetPtr<item_of<D>> materialize(const std::shared_ptr<D>& dataset) {
  std::vector<item_of<D>> items;
  items.reserve(dataset->size());
  for (std::size_t i = 0; i < dataset->size(); ++i) items.push_back(dataset->get(i));
  return in_memory(std::move(items));
}

}  // namespace kiln::data
