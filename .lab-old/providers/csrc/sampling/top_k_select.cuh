// aotinfer.top_k: the k largest entries of each row, without sorting the row.
//
// A count search (radix_threshold.cuh) finds the key B of the k-th largest value; then one
// pass writes every element above B and the first (k - #above) elements equal to B, in
// ascending index order. The output position of element i is
//   #{j < i : key_j > B} + min(#{j < i : key_j == B}, k - #above),
// which a block-wide scan per tile of the row gives, so the result is deterministic.
// NaN sorts below -inf and is only taken when a row has fewer than k other values.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "radix_threshold.cuh"
#include "row_access.cuh"

namespace aotinfer::sampling {

template <typename T>
struct TopKSelectParams {
  const T* input;
  std::int64_t rows, vocab, row_stride, k;
  T* values;  // (rows, k)
  std::int64_t* indices;
};

template <typename T>
__global__ void __launch_bounds__(kRowThreads) top_k_select_kernel(const __grid_constant__ TopKSelectParams<T> p) {
  __shared__ RowRadixShared sh;
  const std::int64_t row = blockIdx.x;
  const T* x = p.input + row * p.row_stride;
  const std::int64_t n = p.vocab, k = p.k;
  auto key_of = [](float v) { return ordered_key(v); };
  // NaN (key 0) takes no part in the search; when fewer than k values remain, B = 0 takes all.
  const SearchTarget target{false, static_cast<std::uint64_t>(k), 0.f, 0, false, true};
  const Threshold t = radix_threshold<false>(RowScope<T>(x, n), key_of, target, sh);
  const std::uint32_t bkey = t.key;  // exact: the tie logic below compares keys with it
  // Elements strictly above B: the search counted keys >= B among participants.
  std::uint64_t above = 0;
  {
    std::uint64_t local = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) local += ordered_key(load_float(x + i)) > bkey;
    above = block_reduce(local, SumOp{}, std::uint64_t{0});
  }
  const std::uint64_t ties_needed = static_cast<std::uint64_t>(k) - above;
  T* vals = p.values + row * k;
  std::int64_t* idx = p.indices + row * k;
  std::uint64_t gt_before = 0, eq_before = 0;  // running counts over earlier tiles
  for (std::int64_t tile = 0; tile < n; tile += blockDim.x) {
    const std::int64_t i = tile + threadIdx.x;
    float v = 0.f;
    std::uint32_t key = 0;
    if (i < n) {
      v = load_float(x + i);
      key = ordered_key(v);
    }
    const bool gt = i < n && key > bkey, eq = i < n && key == bkey;
    // Pack both flags into one scan: high 32 bits count ties, low 32 bits count "above".
    std::uint64_t tile_total;
    const std::uint64_t prefix = block_exclusive_scan((static_cast<std::uint64_t>(eq) << 32) | gt, &tile_total);
    const std::uint64_t my_gt = gt_before + (prefix & 0xffffffffu);
    const std::uint64_t my_eq = eq_before + (prefix >> 32);
    if (gt || (eq && my_eq < ties_needed)) {
      const std::uint64_t pos = my_gt + (my_eq < ties_needed ? my_eq : ties_needed);
      if (pos < static_cast<std::uint64_t>(k)) {
        vals[pos] = x[i];
        idx[pos] = i;
      }
    }
    gt_before += tile_total & 0xffffffffu;
    eq_before += tile_total >> 32;
  }
}

}  // namespace aotinfer::sampling
