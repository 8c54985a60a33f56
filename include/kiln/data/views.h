// Views over datasets: subsets, shuffles, random train/test splits, concatenation and maps. A
// view shares its parent (no items are copied) and reads through it on every get().
//
//   auto all = data::load_digits("data/digits/digits.csv");
//   auto [train, test] = data::random_split(all, 0.8, /*seed=*/7);   // 1438 / 359 items
//   auto firsts = data::slice(train, 0, 100);
//   auto mixed = data::shuffled(all, 3);
//   auto labels = data::map(all, [](const ClassificationItem& it) { return it.label; });
//
// Every random choice comes from data::permutation, so the same seed gives the same view on
// every platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/permutation.h"

namespace kiln::data {

namespace detail {
// InvalidArgument unless every index is below size.
void check_subset_indices(const std::vector<std::size_t>& indices, std::size_t size);
// InvalidArgument unless begin <= end <= size.
void check_slice(std::size_t begin, std::size_t end, std::size_t size);
// The train part's size: round(fraction * size), half away from zero; InvalidArgument unless
// fraction is in [0, 1].
std::size_t split_point(double train_fraction, std::size_t size);
// Position of a global index among concatenated parts: {part, index within it}.
std::pair<std::size_t, std::size_t> locate(const std::vector<std::size_t>& ends, std::size_t index);
}  // namespace detail

// The parent's items at the given indices, in that order (repeats allowed).
template <class Item>
class SubsetDataset final : public Dataset<Item> {
 public:
  SubsetDataset(DatasetPtr<Item> parent, std::vector<std::size_t> indices)
      : parent_(std::move(parent)), indices_(std::move(indices)) {
    detail::check_subset_indices(indices_, parent_->size());
  }
  std::size_t size() const override { return indices_.size(); }
  Item get(std::size_t index) const override {
    detail::check_index("SubsetDataset::get", index, indices_.size());
    return parent_->get(indices_[index]);
  }
  const std::vector<std::size_t>& indices() const noexcept { return indices_; }

 private:
  DatasetPtr<Item> parent_;
  std::vector<std::size_t> indices_;
};

template <DatasetType D>
DatasetPtr<item_of<D>> subset(std::shared_ptr<D> dataset, std::vector<std::size_t> indices) {
  return std::make_shared<const SubsetDataset<item_of<D>>>(std::move(dataset), std::move(indices));
}

// Items [begin, end) of the parent.
template <DatasetType D>
DatasetPtr<item_of<D>> slice(std::shared_ptr<D> dataset, std::size_t begin, std::size_t end) {
  detail::check_slice(begin, end, dataset->size());
  std::vector<std::size_t> indices(end - begin);
  for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = begin + i;
  return subset(std::move(dataset), std::move(indices));
}

// All items, in the order of data::permutation(size, seed).
template <DatasetType D>
DatasetPtr<item_of<D>> shuffled(std::shared_ptr<D> dataset, std::uint64_t seed) {
  auto order = permutation(dataset->size(), seed);
  return subset(std::move(dataset), std::move(order));
}

template <class Item>
struct Split {
  DatasetPtr<Item> train;
  DatasetPtr<Item> test;
};

// A random partition: train holds round(train_fraction * size) items, test the rest; both keep
// the shuffled order. The same seed always gives the same partition.
template <DatasetType D>
Split<item_of<D>> random_split(std::shared_ptr<D> dataset, double train_fraction,
                               std::uint64_t seed) {
  const std::size_t cut = detail::split_point(train_fraction, dataset->size());
  auto order = permutation(dataset->size(), seed);
  std::vector<std::size_t> test_indices(order.begin() + static_cast<std::ptrdiff_t>(cut),
                                        order.end());
  order.resize(cut);
  Split<item_of<D>> split;
  split.train = subset(dataset, std::move(order));
  split.test = subset(std::move(dataset), std::move(test_indices));
  return split;
}

// The parts one after another.
template <class Item>
class ConcatDataset final : public Dataset<Item> {
 public:
  explicit ConcatDataset(std::vector<DatasetPtr<Item>> parts) : parts_(std::move(parts)) {
    std::size_t total = 0;
    for (const auto& part : parts_) ends_.push_back(total += part->size());
  }
  std::size_t size() const override { return ends_.empty() ? 0 : ends_.back(); }
  Item get(std::size_t index) const override {
    detail::check_index("ConcatDataset::get", index, size());
    const auto [part, local] = detail::locate(ends_, index);
    return parts_[part]->get(local);
  }

 private:
  std::vector<DatasetPtr<Item>> parts_;
  std::vector<std::size_t> ends_;  // running totals of the parts' sizes
};

template <class Item>
DatasetPtr<Item> concat(std::vector<DatasetPtr<Item>> parts) {
  return std::make_shared<const ConcatDataset<Item>>(std::move(parts));
}

// fn applied to each parent item when it is read (lazily, on every get(); wrap the result in
// materialize() to apply it once). fn is called from loader worker threads concurrently.
template <class In, class Out>
class MappedDataset final : public Dataset<Out> {
 public:
  MappedDataset(DatasetPtr<In> parent, std::function<Out(const In&)> fn)
      : parent_(std::move(parent)), fn_(std::move(fn)) {}
  std::size_t size() const override { return parent_->size(); }
  Out get(std::size_t index) const override { return fn_(parent_->get(index)); }

 private:
  DatasetPtr<In> parent_;
  std::function<Out(const In&)> fn_;
};

template <DatasetType D, class Fn>
requires std::is_invocable_v < const Fn&, const item_of<D>
& > auto map(std::shared_ptr<D> dataset, Fn fn) {
  using Out = std::decay_t<std::invoke_result_t<const Fn&, const item_of<D>&>>;
  return DatasetPtr<Out>(
      std::make_shared<const MappedDataset<item_of<D>, Out>>(std::move(dataset), std::move(fn)));
}

}  // namespace kiln::data
