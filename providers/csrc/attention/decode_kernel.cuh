// Decode attention over a paged KV cache, on CUDA cores, one CTA per (request, KV head,
// block of query rows, KV split).
//
// The query rows that share one KV head -- the GQA group times q_len_per_req -- are handled
// by one CTA, so every K/V row is read from memory once per group, the decode kernel's
// whole cost. K/V tiles of kTileKeys keys move to shared memory with cp.async, two stages
// deep (the next tile is in flight while the current one is used); page ids are looked up
// per row, one tile ahead, so any page size and both layouts share one code path. Softmax is
// online in the exp2 domain; the output is written normalised with its base-2 LSE, or, with
// split-KV, as a partial state that merge.cuh combines.
//
// Variants (template): query dtype (fp16, bf16) x KV dtype (same, fp8 e4m3, fp8 e5m2) x head
// dim (64, 128, 256). Everything else is a run-time argument.
//
// It serves ROPE_LLAMA and sm_75 (and the AOTINFER_DECODE_KERNEL=cuda_cores pin); fp16/bf16
// and fp8 KV run on decode_tc_kernel.cuh on sm_80+ (fp8 there 4-6x faster than here at
// large shapes: dev/NOTES.md item 53).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "decode_common.cuh"
#include "last_split_merge.cuh"

namespace aotinfer::attention {

constexpr int kDecodeThreads = 128;
constexpr int kTileKeys = 32;   // keys per tile: one per lane in the softmax warps

namespace detail {

// Shared-memory tile of kTileKeys rows x D elements with its 16-byte chunks XOR-swizzled by
// row, so the score loop (each lane a different row, same column) is free of bank conflicts.
template <typename KVT, int D>
struct TileLayout {
  static constexpr int kRowBytes = D * static_cast<int>(sizeof(KVT));
  static constexpr int kChunks = kRowBytes / 16;
  static constexpr int kSwizzle = (kChunks < 8 ? kChunks : 8) - 1;
  static constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(KVT));
  // Element offset of (row, col) in the tile.
  static __device__ __forceinline__ int offset(int row, int col) {
    const int chunk = col / kElemsPerChunk, within = col % kElemsPerChunk;
    return row * D + ((chunk ^ (row & kSwizzle)) * kElemsPerChunk) + within;
  }
};

template <int D>
__device__ __forceinline__ float rope_inv_freq(int i, float log2_theta, float inv_scale) {
  // inv_freq_i = 1 / (rope_scale * theta^(2i/D)), for i in [0, D/2)
  return inv_scale * exp2f(-log2_theta * (2.f * i / D));
}

}  // namespace detail

template <typename QT, typename KVT, int D>
struct DecodeSmem {
  float q[kRowBlock][D];
  KVT k[2][kTileKeys * D];
  KVT v[2][kTileKeys * D];
  float s[kRowBlock][kTileKeys];
  float p[kTileKeys][kRowBlock];
  float alpha[kRowBlock];
  float m[kRowBlock];
  float l[kRowBlock];
};

// One work entry of a decode_kernel CTA: its keys, its rows' output or partial state, and the
// merge when it is the last split of its request.
template <typename QT, typename KVT, int D>
__device__ __forceinline__ void decode_piece(const DecodeParams<QT, KVT>& p, const CtaWork& work) {
  static_assert(D % 64 == 0, "head dim must be a multiple of 64");
  using Layout = detail::TileLayout<KVT, D>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<DecodeSmem<QT, KVT, D>*>(smem_raw);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const std::int64_t b = work.b, kv_head = work.kv_head, split = work.split;
  const int row0 = work.row0, rows = work.rows;

  const KeyRange rg = key_range(p, work);
  const std::int64_t kv_len = rg.kv_len, page_begin = rg.page_begin, k_begin = rg.k_begin, k_end = rg.k_end;
  const float cap_k = soft_cap_k(p.soft_cap);

  // Load the CTA's query rows as float (RoPE applied at their positions).
  for (int idx = tid; idx < kRowBlock * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    float val = 0.f;
    if (r < rows) {
      const std::int64_t gr = row0 + r, qi = gr / p.group, head = kv_head * p.group + gr % p.group;
      const QT* qrow = p.q + (b * p.q_len + qi) * p.q_stride_row + head * p.q_stride_head;
      val = to_f32(qrow[d]);
      if (p.pos_encoding == 1) {
        const int i = d % (D / 2);
        const float partner = to_f32(qrow[d < D / 2 ? d + D / 2 : d - D / 2]);
        float sn, cs;
        sincosf(static_cast<float>(kv_len - p.q_len + qi) * detail::rope_inv_freq<D>(i, p.rope_log2_theta, p.rope_inv_scale), &sn, &cs);
        val = d < D / 2 ? val * cs - partner * sn : val * cs + partner * sn;
      }
    }
    sm.q[r][d] = val;
  }
  if (tid < kRowBlock) {
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.f;
  }

  // Each thread copies one 16-byte chunk column of rows my_row0 + n * kRowStep of every tile.
  // Its page ids for the next tile are loaded while the current tile is used (registers,
  // issued where they stand), so a tile's copies never wait on a dependent page-table load;
  // page arithmetic by a shift for power-of-two page sizes (a 64-bit division is ~70
  // instructions, and it ran once per 16-byte copy).
  constexpr int kChunks = Layout::kChunks;
  static_assert(kDecodeThreads % kChunks == 0 && kTileKeys % (kDecodeThreads / kChunks) == 0,
                "a thread's chunk column repeats every kRowStep rows of a tile");
  constexpr int kRowStep = kDecodeThreads / kChunks;
  constexpr int kRowsPerCopier = kTileKeys / kRowStep;
  const int my_row0 = tid / kChunks, my_col = (tid % kChunks) * Layout::kElemsPerChunk;
  const detail::PageMath pages_of = detail::page_math(p.page_size);
  const KVT* k_base = p.k + kv_head * p.k_stride_head + my_col;
  const KVT* v_base = p.v + kv_head * p.v_stride_head + my_col;
  std::int32_t next_pid[kRowsPerCopier];
  auto load_pids = [&](std::int64_t tile_start) {
#pragma unroll
    for (int n = 0; n < kRowsPerCopier; ++n) {
      const std::int64_t j = tile_start + my_row0 + n * kRowStep;
      next_pid[n] = p.indptr && j < k_end ? detail::load_now(p.indices + page_begin + pages_of.page(j)) : 0;
    }
  };
  load_pids(k_begin);
  auto issue_tile = [&](std::int64_t tile_start, int stage) {
#pragma unroll
    for (int n = 0; n < kRowsPerCopier; ++n) {
      const int row = my_row0 + n * kRowStep;
      const std::int64_t j = tile_start + row;
      const bool valid = j < k_end;
      std::int64_t page = 0, slot = j;  // one contiguous request: page 0, the slot is the key
      if (p.indptr) {
        // detail::clamp_page's expression, written out: calling it changed this kernel's code at
        // d64 and d256 (ptxas placement), and the kernel as measured is kept.
        page = next_pid[n] < 0 ? 0 : (next_pid[n] >= p.num_pages ? p.num_pages - 1 : next_pid[n]);
        slot = j - pages_of.page(j) * p.page_size;
      }
      const KVT* ksrc = k_base + page * p.k_stride_page + slot * p.k_stride_slot;
      const KVT* vsrc = v_base + page * p.v_stride_page + slot * p.v_stride_slot;
      detail::cp_async16(&sm.k[stage][Layout::offset(row, my_col)], valid ? ksrc : p.k, valid);
      detail::cp_async16(&sm.v[stage][Layout::offset(row, my_col)], valid ? vsrc : p.v, valid);
    }
    detail::cp_async_commit();
    load_pids(tile_start + kTileKeys);
  };

  // Per-thread output accumulators: columns c0 + 64*ci, rows rp + 2*ri.
  constexpr int kCols = D / 64;
  constexpr int kRowsPerThread = kRowBlock / 2;
  const int c0 = tid % 64, rp = tid / 64;
  float acc[kCols][kRowsPerThread];
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci)
#pragma unroll
    for (int ri = 0; ri < kRowsPerThread; ++ri) acc[ci][ri] = 0.f;

  const std::int64_t num_tiles = k_end > k_begin ? (k_end - k_begin + kTileKeys - 1) / kTileKeys : 0;
  if (num_tiles > 0) issue_tile(k_begin, 0);
  __syncthreads();  // q, m, l ready

  for (std::int64_t t = 0; t < num_tiles; ++t) {
    const int stage = static_cast<int>(t & 1);
    const std::int64_t tile_start = k_begin + t * kTileKeys;
    if (t + 1 < num_tiles) {
      issue_tile(tile_start + kTileKeys, stage ^ 1);
      detail::cp_async_wait<1>();
    } else {
      detail::cp_async_wait<0>();
    }
    __syncthreads();

    // Scores: lane = key, warp = first of its rows (rows warp, warp+4, ...).
    {
      const int key = lane;
      const std::int64_t j = tile_start + key;
      const KVT* ktile = sm.k[stage];
      float dot[kRowBlock / 4];
#pragma unroll
      for (int i = 0; i < kRowBlock / 4; ++i) dot[i] = 0.f;
      if (p.pos_encoding == 1) {
        // Rotate the key's pairs (i, i + D/2) at its index j, then dot both halves.
#pragma unroll 2
        for (int c = 0; c < D / 2; c += 8) {
          float lo[8], hi[8];
          load8(ktile + Layout::offset(key, c), lo);
          load8(ktile + Layout::offset(key, c + D / 2), hi);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            float sn, cs;
            sincosf(static_cast<float>(j) * detail::rope_inv_freq<D>(c + e, p.rope_log2_theta, p.rope_inv_scale), &sn, &cs);
            const float a = lo[e] * cs - hi[e] * sn, bb = hi[e] * cs + lo[e] * sn;
            lo[e] = a;
            hi[e] = bb;
          }
#pragma unroll
          for (int i = 0; i < kRowBlock / 4; ++i) {
            const int r = warp + 4 * i;
            if (r < rows) {
#pragma unroll
              for (int e = 0; e < 8; ++e) dot[i] += sm.q[r][c + e] * lo[e] + sm.q[r][c + D / 2 + e] * hi[e];
            }
          }
        }
      } else {
#pragma unroll 4
        for (int c = 0; c < D; c += 8) {
          float kv[8];
          load8(ktile + Layout::offset(key, c), kv);
#pragma unroll
          for (int i = 0; i < kRowBlock / 4; ++i) {
            const int r = warp + 4 * i;
            if (r < rows) {
              const float4 qa = *reinterpret_cast<const float4*>(&sm.q[r][c]);
              const float4 qb = *reinterpret_cast<const float4*>(&sm.q[r][c + 4]);
              dot[i] += qa.x * kv[0] + qa.y * kv[1] + qa.z * kv[2] + qa.w * kv[3] + qb.x * kv[4] +
                        qb.y * kv[5] + qb.z * kv[6] + qb.w * kv[7];
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kRowBlock / 4; ++i) {
        const int r = warp + 4 * i;
        if (r >= rows) continue;
        const std::int64_t gr = row0 + r, qi = gr / p.group;
        const std::int64_t pos = kv_len - p.q_len + qi;
        float s = dot[i] * p.sm_scale;
        if (p.soft_cap > 0.f) s = soft_capped(s, p.soft_cap, cap_k);
        if (p.pos_encoding == 2) {
          const std::int64_t head = kv_head * p.group + gr % p.group;
          s += p.alibi_slopes[head] * static_cast<float>(j - pos);
        }
        const bool visible = j < k_end && j <= pos && (p.window_left < 0 || pos - j <= p.window_left);
        sm.s[r][key] = visible ? s * kLog2e : -INFINITY;
      }
    }
    __syncthreads();

    // Online softmax, one warp per row (rows warp, warp+4, ...), lane = key.
    for (int r = warp; r < rows; r += 4) {
      const float x = sm.s[r][lane];
      float mx = x;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sm.m[r];
      const float m_new = fmaxf(m_old, mx);
      const float base = softmax_base(m_new);  // (0 while all is masked; NaN still reaches l)
      const float pr = exp2f(x - base);
      const float alpha = exp2f(m_old - base);
      float sum = pr;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      sm.p[lane][r] = pr;
      __syncwarp();
      if (lane == 0) {
        sm.alpha[r] = alpha;
        sm.m[r] = m_new;
        sm.l[r] = sm.l[r] * alpha + sum;
      }
    }
    __syncthreads();

    // Output: acc[c][r] = alpha_r * acc + sum_key p[key][r] * v[key][c].
    {
      const KVT* vtile = sm.v[stage];
#pragma unroll
      for (int ri = 0; ri < kRowsPerThread; ++ri) {
        const int r = rp + 2 * ri;
        const float a = r < rows ? sm.alpha[r] : 1.f;
#pragma unroll
        for (int ci = 0; ci < kCols; ++ci) acc[ci][ri] *= a;
      }
#pragma unroll 4
      for (int key = 0; key < kTileKeys; ++key) {
        float vv[kCols];
#pragma unroll
        for (int ci = 0; ci < kCols; ++ci) vv[ci] = to_f32(vtile[Layout::offset(key, c0 + 64 * ci)]);
#pragma unroll
        for (int ri = 0; ri < kRowsPerThread; ++ri) {
          if (rp + 2 * ri >= rows) break;  // uniform per warp; small GQA groups skip the rest
          const float pr = sm.p[key][rp + 2 * ri];
#pragma unroll
          for (int ci = 0; ci < kCols; ++ci) acc[ci][ri] += pr * vv[ci];
        }
      }
    }
    __syncthreads();  // the stage just read is refilled by the next iteration
  }
  __syncthreads();

  // Write the rows: normalised output and base-2 LSE, or this split's partial state.
#pragma unroll
  for (int ri = 0; ri < kRowsPerThread; ++ri) {
    const int r = rp + 2 * ri;
    if (r >= rows) continue;
    const RowOut<QT> o = row_out(p, b, split, kv_head, row0 + r, D, sm.m[r], sm.l[r]);
#pragma unroll
    for (int ci = 0; ci < kCols; ++ci) {
      const float x = acc[ci][ri] * o.scale;
      if (o.partial) {
        o.partial[c0 + 64 * ci] = x;
      } else {
        o.out[c0 + 64 * ci] = from_f32<QT>(x);
      }
    }
    if (o.lse_at && c0 == 0) *o.lse_at = o.lse;
  }
  if (p.arrivals && p.splits > 1 && split >= 0) merge_if_last_split(p, work, D);
}

template <typename QT, typename KVT, int D>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_kernel(const __grid_constant__ DecodeParams<QT, KVT> p) {
  for_each_work_entry(p, [&](const CtaWork& work) { decode_piece<QT, KVT, D>(p, work); });
}

}  // namespace aotinfer::attention
