// append_paged_kv_cache: copies new keys and values into their pages. Token i goes to request
// batch_indices[i] at position positions[i], i.e. page indices[indptr[b] + pos / page_size],
// slot pos % page_size. A token the table cannot place (batch index outside [0, batch), a
// negative position, a position past the request's pages or the indices, a page id outside
// the cache) is skipped, never written: nothing here is checked on the host, which would
// need a synchronisation, so every read stays inside its tensor.
#pragma once

#include <cstdint>

namespace aotinfer::attention {

template <typename T>
struct AppendParams {
  const T* key;  // (nnz, Hkv, D), strides below, last dim contiguous
  const T* value;
  std::int64_t key_stride_n, key_stride_h, value_stride_n, value_stride_h;
  const std::int32_t* batch_indices;
  const std::int32_t* positions;
  T* k_cache;
  T* v_cache;
  std::int64_t k_stride_page, k_stride_slot, k_stride_head;
  std::int64_t v_stride_page, v_stride_slot, v_stride_head;
  const std::int32_t* indices;
  const std::int32_t* indptr;
  std::int64_t nnz, heads, dim, page_size, batch, num_pages, num_indices;
};

template <typename T>
__global__ void append_kv_kernel(const __grid_constant__ AppendParams<T> p) {
  const std::int64_t i = blockIdx.x;
  const std::int64_t b = p.batch_indices[i], pos = p.positions[i];
  if (b < 0 || b >= p.batch || pos < 0) return;
  const std::int64_t slot_page = p.indptr[b] + pos / p.page_size;
  if (slot_page < 0 || slot_page >= p.indptr[b + 1] || slot_page >= p.num_indices) return;
  const std::int64_t page = p.indices[slot_page], slot = pos % p.page_size;
  if (page < 0 || page >= p.num_pages) return;
  for (std::int64_t e = threadIdx.x; e < p.heads * p.dim; e += blockDim.x) {
    const std::int64_t h = e / p.dim, d = e % p.dim;
    p.k_cache[page * p.k_stride_page + slot * p.k_stride_slot + h * p.k_stride_head + d] =
        p.key[i * p.key_stride_n + h * p.key_stride_h + d];
    p.v_cache[page * p.v_stride_page + slot * p.v_stride_slot + h * p.v_stride_head + d] =
        p.value[i * p.value_stride_n + h * p.value_stride_h + d];
  }
}

}  // namespace aotinfer::attention
