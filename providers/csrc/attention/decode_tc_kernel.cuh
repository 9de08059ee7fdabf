// Decode attention on tensor cores (mma.sync m16n8k16, sm_80+), for fp16/bf16 KV in q's dtype
// or fp8 KV, without in-kernel RoPE. One CTA per (request, KV head, block of 16 query rows, KV
// split), the same grid as the CUDA-core kernel (decode_kernel.cuh), which still serves
// ROPE_LLAMA and sm_75.
//
// fp8 KV (e4m3, e5m2): the tiles land in a ring of fp8 tiles per warp (half the bytes), and
// each tile is converted into one f16 K/V tile pair that the same fragment code reads; the
// MMAs run in f16, since every fp8 value is an f16 (bf16 q is rescaled by a power of two to
// fit f16's range). Measured against the CUDA-core kernel, which served fp8 before (H200,
// history/ab-decode-fp8-tc-b48d435.txt): 64 x 4096 958 -> 239 us, 16 x 16384 1488 -> 242,
// 1 x 1024 28 -> 8.8; then the conversion's loads batched, two chains of QK MMAs and P's
// high part only (below; history/ab-decode-fp8-three-labs-dac32a0.txt): 239 -> 212 us at
// 64 x 4096, 242 -> 214 at 16 x 16384, 8.8 -> 8.6 at 1 x 1024.
//
// Why tensor cores for a memory-bound kernel: with the GQA group in the MMA's 16 rows, one
// m16n8k16 does 16x8x16 multiply-adds for a handful of instructions, so a 16-key tile of K
// and V (8 KB at D = 128) costs ~100 instructions per warp instead of ~1500 on CUDA cores
// (dev/NOTES.md: the CUDA-core kernel was issue-bound at ~1.1 TB/s).
//
// Work split: the four warps take interleaved 16-key tiles of the CTA's key range, each with
// its own cp.async pipeline (`stages` tiles of K and V in its own shared memory, so the main
// loop needs only __syncwarp) and its own online-softmax state; the four states merge
// through shared memory at the end. Page ids travel through the same cp.async pipeline one
// depth ahead of their tile, and every copy instruction moves whole rows (coalesced).
//
// Precision: S = Q K^T is exact products accumulated in fp32. P is split into a 16-bit high
// part and the 16-bit rounding of the remainder, and both go through the PV MMA, so the
// probabilities carry ~16 significant bits (bf16 alone would carry 8 and cost up to 2^-9
// relative error per weight). With fp8 KV only the f16 high part goes (11 bits, 2^-11
// relative, as in FlashInfer's f16 P): the fp8 values themselves step by 2^-4 (e4m3) or
// 2^-3 (e5m2), and it halves the PV MMAs of the kernel that is not memory-bound.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cluster_merge.cuh"
#include "decode_common.cuh"
#include "last_split_merge.cuh"

namespace aotinfer::attention {

constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;
constexpr int kTcTileKeys = 16;  // keys per warp tile: the k extent of one PV MMA
constexpr int kTcMaxStages = 4;

// Shared memory of the tensor-core kernel for head dim D and `stages` pipeline stages:
// q (16 x D), the merge scratch of m and l, the page-id ring, then per warp `stages` x
// (K tile, V tile).
// The K/V region is reused as the float merge buffer (4 x 16 x D floats) at the end.
// Tiles are row-major, D elements per row, with 16-byte chunk c of row r stored at chunk
// c ^ (r & 7) (an XOR swizzle within each 128-byte bank line). Why: the 8 row addresses of
// one ldmatrix then fall in 8 different bank groups, and each cp.async instruction (whole
// rows) writes whole bank lines, so its shared-memory side needs no extra wavefronts. An
// earlier padded pitch (D + 8) kept ldmatrix conflict-free but shifted rows by 16 bytes
// against the bank lines; Nsight Compute then showed every copy split into ~7.5 wavefronts,
// and the two lanes of a 32-byte global sector landing in different wavefronts each fetched
// it: 1.5x the L2 sectors of the data, a 34% L2 "hit" rate and 90% L2 throughput at batch
// 64 x 4096 (dev/NOTES.md). Each lane's offsets are precomputed once (the address
// arithmetic was once a large share of the loop's instructions).
__host__ __device__ constexpr std::size_t tc_q_bytes(int d) { return static_cast<std::size_t>(kRowBlock) * d * 2; }
__host__ __device__ constexpr std::size_t tc_ml_bytes() {
  return static_cast<std::size_t>(kTcWarps) * kRowBlock * 2 * 4;
}
__host__ __device__ constexpr std::size_t tc_pid_bytes() {  // page ids, per warp and stage: [4][4][16] int
  return static_cast<std::size_t>(kTcWarps) * kTcMaxStages * kTcTileKeys * 4;
}
__host__ __device__ constexpr std::size_t tc_tile_bytes(int d, int kv_size = 2) {
  return static_cast<std::size_t>(kTcTileKeys) * d * kv_size;
}
// kv_size: bytes per KV element. fp8 KV (1) lands in a ring of fp8 tiles and is converted into
// one f16 K/V tile pair per warp, which the MMAs read.
__host__ __device__ constexpr std::size_t tc_smem_bytes(int d, int stages, int kv_size = 2) {
  const std::size_t kv = static_cast<std::size_t>(kTcWarps) * stages * 2 * tc_tile_bytes(d, kv_size) +
                         (kv_size == 1 ? static_cast<std::size_t>(kTcWarps) * 2 * tc_tile_bytes(d) : 0);
  const std::size_t merge = static_cast<std::size_t>(kTcWarps) * kRowBlock * d * 4;
  return tc_q_bytes(d) + tc_ml_bytes() + tc_pid_bytes() + (kv > merge ? kv : merge);
}

namespace tc {

// Element offset of 16-byte chunk `chunk` of row `row` in a tile (swizzled, see above).
template <int D>
__device__ __forceinline__ int at(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) * 8);
}

// The offsets at(row, 2 * j + half) for j = 0..3, for one lane's fixed row and half (0 or
// 1): at(row, 2 * s + half) = off[s & 3] + 64 * (s >> 2), because the swizzle only touches
// a chunk index's low three bits. ldmatrix addresses are then a register plus a constant.
template <int D>
struct PairOffsets {
  int off[4];
  __device__ __forceinline__ PairOffsets(int row, int half) {
    const int x = half ^ (row & 7);
#pragma unroll
    for (int j = 0; j < 4; ++j) off[j] = row * D + ((2 * j) ^ x) * 8;
  }
  __device__ __forceinline__ int operator()(int s) const { return off[s & 3] + 64 * (s >> 2); }
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// d += a (16x16, row) * b (16x8, col), fp32 accumulators; T picks the f16 or bf16 form (the
// PTX type is part of the instruction text, so the macro only splices it in).
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
#define AOTINFER_MMA_M16N8K16(ab)                                                                     \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ab "." ab ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
               "{%8,%9}, {%0,%1,%2,%3};\n"                                                            \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
  if constexpr (std::is_same_v<T, __half>) {
    AOTINFER_MMA_M16N8K16("f16");
  } else {
    AOTINFER_MMA_M16N8K16("bf16");
  }
#undef AOTINFER_MMA_M16N8K16
}

// Two floats as one register of two 16-bit values (x in the low half: the lower column),
// and what rounding them lost, as floats.
template <typename T>
__device__ __forceinline__ std::uint32_t pack2(float x, float y, float& rx, float& ry) {
  const auto h = [&] {
    if constexpr (std::is_same_v<T, __half>) {
      return __floats2half2_rn(x, y);
    } else {
      return __floats2bfloat162_rn(x, y);
    }
  }();
  rx = x - __low2float(h);
  ry = y - __high2float(h);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

__device__ __forceinline__ void wait_stages_minus_2(int stages) {
  // cp.async.wait_group takes an immediate: one branch per supported depth.
  if (stages <= 2) {
    detail::cp_async_wait<0>();
  } else if (stages == 3) {
    detail::cp_async_wait<1>();
  } else {
    detail::cp_async_wait<2>();
  }
}

template <typename T>
__device__ __forceinline__ const T* shfl_ptr(const T* x, int src) {
  const auto bits = reinterpret_cast<std::uintptr_t>(x);
  const unsigned lo = __shfl_sync(0xffffffffu, static_cast<unsigned>(bits), src);
  const unsigned hi = __shfl_sync(0xffffffffu, static_cast<unsigned>(bits >> 32), src);
  return reinterpret_cast<const T*>((static_cast<std::uintptr_t>(hi) << 32) | lo);
}

}  // namespace tc

// One work entry of a decode_tc_kernel CTA: its keys, its rows' output or partial state, and
// the merge when it is the last split of its request.
template <typename T, typename KVT, int D>
__device__ __forceinline__ void decode_tc_piece(const DecodeParams<T, KVT>& p, const CtaWork& work) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  static_assert(D % 64 == 0, "head dim must be a multiple of 64");
  // fp8 KV: the MMAs run in f16 (every fp8 value is an f16; bf16 q is rescaled below).
  constexpr bool kFp8 = kIsFp8<KVT>;
  using MT = std::conditional_t<kFp8, __half, T>;
  static_assert(kFp8 || std::is_same_v<KVT, T>, "KV in q's dtype or fp8");
  constexpr int kChunks = D / 8;             // 16-byte chunks per row of q
  constexpr int kKvChunks = D * static_cast<int>(sizeof(KVT)) / 16;  // and of K / V
  constexpr int kKvElems = 16 / static_cast<int>(sizeof(KVT));        // KV elements per chunk
  constexpr int kKSteps = D / 16;            // k steps of S = Q K^T
  constexpr int kNTiles = D / 8;             // n tiles of O = P V
  extern __shared__ __align__(16) unsigned char smem_raw[];  // same declaration as decode_kernel's
  T* sq = reinterpret_cast<T*>(smem_raw);
  float* sml = reinterpret_cast<float*>(smem_raw + tc_q_bytes(D));  // [warp][row][m, l]
  int* spid = reinterpret_cast<int*>(smem_raw + tc_q_bytes(D) + tc_ml_bytes());
  unsigned char* skv = smem_raw + tc_q_bytes(D) + tc_ml_bytes() + tc_pid_bytes();
  const int stages = p.stages;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;  // MMA fragment coordinates: row group, thread in group
  const std::int64_t b = work.b, kv_head = work.kv_head, split = work.split;
  const int row0 = work.row0, rows = work.rows;

  // q rows into shared memory (zeros for absent rows: their scores are 0 and never written),
  // by cp.async and before the page table is read: the copies are in flight with the
  // key_range loads and land with the prologue's page ids (its cp_async_wait<0>). A plain
  // load and store here made each thread wait for q before it issued the page-table loads.
  // Row indices fit 32 bits (q_len * group rows): no 64-bit division on the critical path.
  for (int idx = tid; idx < kRowBlock * kChunks; idx += kTcThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const T* src = p.q;
    if (r < rows) {
      const unsigned gr = static_cast<unsigned>(row0 + r), group = static_cast<unsigned>(p.group);
      const std::int64_t qi = gr / group, head = kv_head * p.group + gr % group;
      src = p.q + (b * p.q_len + qi) * p.q_stride_row + head * p.q_stride_head + c * 8;
    }
    detail::cp_async16(sq + tc::at<D>(r, c), src, r < rows);
  }
  const KeyRange rg = key_range(p, work);

  const bool capped = p.soft_cap > 0.f;
  const bool plain_scores = !capped && p.pos_encoding != 2;
  const float scale_log2 = p.sm_scale * kLog2e;
  const float cap_k = soft_cap_k(p.soft_cap);
  // bf16 q with fp8 KV runs as f16 q times 2^-s (below): the scores get q_up = 2^s back.
  constexpr bool kRescaledQ = kFp8 && !std::is_same_v<T, __half>;
  float q_up = 1.f;
  // Positions of the CTA's first and last query rows.
  const std::int64_t pos_lo = rg.kv_len - p.q_len + row0 / p.group;
  const std::int64_t pos_hi = rg.kv_len - p.q_len + (row0 + rows - 1) / p.group;
  // The two query rows of this thread's fragments (g and g + 8): position, ALiBi slope.
  std::int64_t pos[2];
  float slope[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const std::int64_t gr = row0 + (r < rows ? r : 0);
    pos[h] = rg.kv_len - p.q_len + gr / p.group;
    slope[h] = p.pos_encoding == 2 ? p.alibi_slopes[kv_head * p.group + gr % p.group] : 0.f;
  }

  // This warp's tiles: w, w + 4, w + 8, ... of the CTA's range.
  const std::int64_t span = rg.k_end > rg.k_begin ? rg.k_end - rg.k_begin : 0;
  const std::int64_t num_tiles = (span + kTcTileKeys - 1) / kTcTileKeys;
  const int n_w = num_tiles > warp ? static_cast<int>((num_tiles - warp + kTcWarps - 1) / kTcWarps) : 0;
  auto tile_start = [&](int i) { return rg.k_begin + (static_cast<std::int64_t>(i) * kTcWarps + warp) * kTcTileKeys; };
  constexpr int kTileElems = kTcTileKeys * D;
  KVT* my_kv = reinterpret_cast<KVT*>(skv) + static_cast<std::size_t>(warp) * stages * 2 * kTileElems;
  // fp8: this warp's f16 K/V tile pair, after every warp's ring.
  MT* my_f16 = reinterpret_cast<MT*>(skv + static_cast<std::size_t>(kTcWarps) * stages * 2 * kTileElems * sizeof(KVT)) +
               static_cast<std::size_t>(warp) * 2 * kTileElems;

  // Copies: each cp.async instruction of the warp moves whole rows (512 contiguous bytes at
  // D = 128: two rows of 16 lanes), so no 32-byte sector is requested twice.
  //
  // Page ids travel through the same pipeline, one depth ahead: the copy of tile t's 16 page
  // ids (lanes 0-15, cp.async into ring slot t % stages, the slot of its K/V stage) is
  // committed with tile t - stages + 1's K/V, so it has landed when tile t's copies are
  // issued and no page-table load waits on a tile's critical path. (Measured, that alone did
  // not move the time: the copy bookkeeping's instruction count was the limit; dev/NOTES.md.)
  constexpr int kLanesPerRow = kKvChunks < 32 ? kKvChunks : 32;
  constexpr int kRowsPerCopy = 32 / kLanesPerRow;
  constexpr int kCopies = kTcTileKeys / kRowsPerCopy;
  const int my_chunk = lane % kLanesPerRow, my_row = lane / kLanesPerRow;
  int* my_pid = spid + warp * kTcMaxStages * kTcTileKeys;
  // Page arithmetic by a shift where the page size is a power of two (a 32-bit division is
  // ~20 instructions, and the copy bookkeeping ran two per tile: Nsight Compute at 64 x 4096,
  // history/ncu-decode-source-92a4326.txt). And where every tile lies inside one page (page
  // sizes that are multiples of the tile, a range that starts on a tile boundary; or one
  // contiguous request), a tile's rows are one base plus a stride: one page id per tile, and
  // no per-row pointers passed between lanes.
  const std::int64_t page_size = p.page_size;
  const detail::PageMath pages = detail::page_math(page_size);
  const bool tile_in_page =
      !p.indptr || (page_size % kTcTileKeys == 0 && rg.k_begin % kTcTileKeys == 0);
  auto fetch_pages = [&](int t, int slot) {  // slot == t % stages
    const std::int64_t j = tile_start(t) + lane;
    if (!p.indptr || lane >= (tile_in_page ? 1 : kTcTileKeys) || t >= n_w || j >= rg.k_end) return;
    detail::cp_async4(my_pid + slot * kTcTileKeys + lane, p.indices + rg.page_begin + pages.page(j));
  };
  const KVT* k_head = p.k + kv_head * p.k_stride_head;
  const KVT* v_head = p.v + kv_head * p.v_stride_head;
  // This lane's element offset for copy c of a tile: row c * kRowsPerCopy + my_row, chunk
  // my_chunk swizzled by the row. The swizzle repeats every 8 rows (kDstPeriod copies), so
  // up to D = 128 the offsets of one period sit in registers and the rest add a constant;
  // at D = 256 (one row per copy, registers scarce) one XOR with a constant per copy.
  constexpr int kDstPeriod = 8 / kRowsPerCopy < kCopies ? 8 / kRowsPerCopy : kCopies;
  constexpr bool kDstInRegs = kDstPeriod <= 4;
  const int lane_x = my_chunk ^ my_row;  // (c * R + my_row) & 7 == ((c * R) & 7) ^ my_row
  int dst_reg[kDstInRegs ? kDstPeriod : 1];
#pragma unroll
  for (int j = 0; j < (kDstInRegs ? kDstPeriod : 1); ++j)
    dst_reg[j] = (j * kRowsPerCopy + my_row) * D + 8 * (lane_x ^ ((j * kRowsPerCopy) & 7));
  auto dst_of = [&](int c) {
    if constexpr (kFp8) {  // the fp8 ring is not swizzled: the conversion reads whole rows
      return (c * kRowsPerCopy + my_row) * D + my_chunk * kKvElems;
    } else if constexpr (kDstInRegs) {
      return dst_reg[c % kDstPeriod] + (c / kDstPeriod) * 8 * D;
    } else {
      return (c * kRowsPerCopy + my_row) * D + 8 * (lane_x ^ ((c * kRowsPerCopy) & 7));
    }
  };
  // K/V of tile i into stage si == i % stages (its page ids have landed there), and the
  // page ids of tile i + stages - 1 into the ring slot before it.
  auto issue = [&](int i, int si) {
    const std::int64_t t0 = tile_start(i);
    const std::int64_t left = rg.k_end - t0;  // rows of this tile that exist
    if (tile_in_page && left >= kTcTileKeys) {
      // Row r of the tile is slot slot0 + r of one page. (A range's last, partial tile takes
      // the general path below: its absent rows then point at the cache's first row.)
      std::int64_t page = 0, slot0 = t0;  // one contiguous request: page 0, the slot is the key
      if (p.indptr) {
        page = detail::clamp_page(my_pid[si * kTcTileKeys], p.num_pages);
        slot0 = t0 - pages.page(t0) * page_size;
      }
      const KVT* ks = k_head + page * p.k_stride_page + (slot0 + my_row) * p.k_stride_slot + my_chunk * kKvElems;
      const KVT* vs = v_head + page * p.v_stride_page + (slot0 + my_row) * p.v_stride_slot + my_chunk * kKvElems;
      const std::int64_t k_step = kRowsPerCopy * p.k_stride_slot, v_step = kRowsPerCopy * p.v_stride_slot;
      KVT* kd = my_kv + si * 2 * kTileElems;
      KVT* vd = kd + kTileElems;
#pragma unroll
      for (int c = 0; c < kCopies; ++c) {  // every row present
        detail::cp_async16(kd + dst_of(c), ks + c * k_step, true);
        detail::cp_async16(vd + dst_of(c), vs + c * v_step, true);
      }
      fetch_pages(i + stages - 1, si == 0 ? stages - 1 : si - 1);
      __syncwarp();  // the ring slot read above is rewritten by a later call, by other lanes
      return;
    }
    // The general path (tiles that cross pages, a range's last partial tile): lane r (mod 16)
    // turns key row r into its K and V row addresses once; absent rows point at the cache's
    // first row, which cp.async then does not read.
    const KVT* krow = p.k;
    const KVT* vrow = p.v;
    {
      const int r = lane % kTcTileKeys;
      const std::int64_t j = t0 + r;
      if (r < left) {
        std::int64_t page = 0, slot = j;  // one request: page 0, the slot is the key
        if (p.indptr) {
          const int id_at = tile_in_page ? 0 : r;  // one page id per tile there
          page = detail::clamp_page(my_pid[si * kTcTileKeys + id_at], p.num_pages);
          slot = j - pages.page(j) * page_size;
        }
        krow = k_head + page * p.k_stride_page + slot * p.k_stride_slot;
        vrow = v_head + page * p.v_stride_page + slot * p.v_stride_slot;
      }
    }
    KVT* kd = my_kv + si * 2 * kTileElems;
    KVT* vd = kd + kTileElems;
#pragma unroll
    for (int c = 0; c < kCopies; ++c) {
      const int row = c * kRowsPerCopy + my_row;
      const KVT* ks = tc::shfl_ptr(krow, row) + my_chunk * kKvElems;
      const KVT* vs = tc::shfl_ptr(vrow, row) + my_chunk * kKvElems;
      detail::cp_async16(kd + dst_of(c), ks, row < left);
      detail::cp_async16(vd + dst_of(c), vs, row < left);
    }
    fetch_pages(i + stages - 1, si == 0 ? stages - 1 : si - 1);
    __syncwarp();  // the ring slot read above is rewritten by a later call, by other lanes
  };

  // Prologue: page ids of the first stages - 1 tiles, then their K/V. (Fetching request 0's
  // first page ids before indptr arrives, on the guess indptr[0] == 0, was measured and left
  // out: 16 x 1024 skewed 1.2% faster, a batch of one 1% slower; dev/NOTES.md item 44.)
  for (int t = 0; t < stages - 1; ++t) fetch_pages(t, t);
  detail::cp_async_commit();
  detail::cp_async_wait<0>();
  __syncwarp();
  for (int s = 0; s < stages - 1; ++s) {
    if (s < n_w) issue(s, s);
    detail::cp_async_commit();  // empty groups keep the wait counts uniform
  }
  __syncthreads();  // q in shared memory
  if constexpr (kRescaledQ) {
    // bf16 q for f16 MMAs: q times 2^-s, with s the smallest shift that brings its largest
    // |element| below 2^15 (f16's limit is 65504), and the scores get 2^s back. bf16's 8
    // significant bits fit f16's 11; only elements 2^29 times smaller than the largest can
    // lose bits (as f16 subnormals), far below what the fp32 dot product resolves.
    const __nv_bfloat162* q2 = reinterpret_cast<const __nv_bfloat162*>(sq);
    float mx = 0.f;
    for (int idx = tid; idx < kRowBlock * D / 2; idx += kTcThreads) {
      const float2 f = __bfloat1622float2(q2[idx]);
      mx = fmaxf(mx, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) sml[warp] = mx;  // sml is free until the warps' merge
    __syncthreads();
    mx = fmaxf(fmaxf(sml[0], sml[1]), fmaxf(sml[2], sml[3]));
    int e = 0;
    if (mx > 0.f && mx < INFINITY) frexpf(mx, &e);  // mx < 2^e
    const int shift = e > 15 ? e - 15 : 0;
    const float down = ldexpf(1.f, -shift);
    q_up = ldexpf(1.f, shift);
    __half2* h2 = reinterpret_cast<__half2*>(sq);
    for (int idx = tid; idx < kRowBlock * D / 2; idx += kTcThreads) {  // the elements this thread read
      const float2 f = __bfloat1622float2(q2[idx]);
      h2[idx] = __floats2half2_rn(f.x * down, f.y * down);
    }
    __syncthreads();
  }
  const MT* sqm = reinterpret_cast<const MT*>(sq);

  // Per-lane ldmatrix rows: A (q) and the transposed V want rows 0-15 in lane order
  // (lanes 8-15 -> rows 8-15); non-transposed K wants keys 0-7 then 8-15 in lanes 16-31.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_chunk = (lane >> 3) & 1;
  const tc::PairOffsets<D> a_off(a_row, a_chunk), k_off(k_row, k_chunk);

  // q's A fragments stay in registers up to D = 128 (32 registers); at D = 256 they would
  // push the kernel past 255, so it reloads them from shared memory per tile.
  constexpr bool kQInRegs = D <= 128;
  std::uint32_t qf[kQInRegs ? kKSteps : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) tc::ldsm_x4(qf[ks], sqm + a_off(ks));
  }

  float o[kNTiles][4];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int i = 0, ci = 0; i < n_w; ++i, ci = ci + 1 == stages ? 0 : ci + 1) {  // ci == i % stages
    tc::wait_stages_minus_2(stages);
    __syncwarp();  // tile i visible to the whole warp; the stage refilled next was read by all lanes
    if (i + stages - 1 < n_w) issue(i + stages - 1, ci == 0 ? stages - 1 : ci - 1);
    detail::cp_async_commit();
    const MT* kt;
    if constexpr (kFp8) {
      // This lane's 16-byte fp8 chunks of the K and V tiles into the f16 pair (swizzled, as
      // ldmatrix reads it); the pair is rewritten next tile, after the __syncwarp above.
      constexpr int kConvPerLane = kTcTileKeys * kKvChunks / 32;
      const KVT* ring = my_kv + ci * 2 * kTileElems;
      auto chunk_of = [&](int x, int kv) {  // this lane's x-th 16-byte chunk of the K or V tile
        const int idx = lane + 32 * x, row = idx / kKvChunks, c = idx % kKvChunks;
        return *reinterpret_cast<const uint4*>(ring + kv * kTileElems + row * D + c * kKvElems);
      };
      auto put_f16 = [&](int x, int kv, uint4 w) {  // its 16 halves into the pair, swizzled
        const int idx = lane + 32 * x, row = idx / kKvChunks, c = idx % kKvChunks;
        const uint2 a = fp8x4_to_half4<KVT>(w.x), bb = fp8x4_to_half4<KVT>(w.y);
        const uint2 cc = fp8x4_to_half4<KVT>(w.z), dd = fp8x4_to_half4<KVT>(w.w);
        MT* dst = my_f16 + kv * kTileElems;
        *reinterpret_cast<uint4*>(dst + tc::at<D>(row, 2 * c)) = make_uint4(a.x, a.y, bb.x, bb.y);
        *reinterpret_cast<uint4*>(dst + tc::at<D>(row, 2 * c + 1)) = make_uint4(cc.x, cc.y, dd.x, dd.y);
      };
      // A batch's loads all before its first store: the ring and the f16 pair are one shared
      // array to the compiler, which keeps every load after the stores before it, so each
      // conversion waited out its own load's latency (Nsight Compute: 23% of the stall
      // samples, on the first use of each load). K and V in one batch up to D = 128; at
      // D = 256 (no registers to spare: a batch of 8 spilled on sm_120f) four chunks of one.
      constexpr int kBatchKV = D <= 128 ? 2 : 1, kBatchX = D <= 128 ? kConvPerLane : 4;
#pragma unroll
      for (int kv0 = 0; kv0 < 2; kv0 += kBatchKV) {
#pragma unroll
        for (int x0 = 0; x0 < kConvPerLane; x0 += kBatchX) {
          uint4 w[kBatchX][kBatchKV];
#pragma unroll
          for (int x = 0; x < kBatchX; ++x) {
#pragma unroll
            for (int kb = 0; kb < kBatchKV; ++kb) w[x][kb] = chunk_of(x0 + x, kv0 + kb);
          }
#pragma unroll
          for (int x = 0; x < kBatchX; ++x) {
#pragma unroll
            for (int kb = 0; kb < kBatchKV; ++kb) put_f16(x0 + x, kv0 + kb, w[x][kb]);
          }
        }
      }
      __syncwarp();
      kt = my_f16;
    } else {
      kt = my_kv + ci * 2 * kTileElems;
    }
    const MT* vt = kt + kTileElems;

    // S (16 rows x 16 keys) = Q K^T.
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    // At d128: odd k steps into a second pair of accumulators, so four chains of dependent
    // MMAs of half the length, added at the end (fp8 64 x 4096 0.976x, bf16 0.983-1.000x in
    // their A/Bs; at d64 it spilled with fp8, and d256 reloads q per tile).
    float s_odd[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    constexpr bool kTwoChains = D == 128;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      std::uint32_t bk[4];
      tc::ldsm_x4(bk, kt + k_off(ks));
      float(&acc)[2][4] = kTwoChains && ks % 2 ? s_odd : s;
      if constexpr (kQInRegs) {
        tc::mma<MT>(acc[0], qf[ks], bk[0], bk[1]);
        tc::mma<MT>(acc[1], qf[ks], bk[2], bk[3]);
      } else {
        std::uint32_t a[4];
        tc::ldsm_x4(a, sqm + a_off(ks));
        tc::mma<MT>(s[0], a, bk[0], bk[1]);
        tc::mma<MT>(s[1], a, bk[2], bk[3]);
      }
    }
    if constexpr (kTwoChains) {
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] += s_odd[n][e];
      }
    }

    if constexpr (kRescaledQ) {
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] *= q_up;
      }
    }
    // Scale, cap, bias, mask; base 2. A tile every row sees whole (the common case: inside
    // the range, before every row's position, inside the window) without cap or ALiBi is
    // one multiply per score; with the cap alone, the cap and two multiplies.
    const std::int64_t j0 = tile_start(i);
    const bool whole = j0 + kTcTileKeys <= rg.k_end && j0 + kTcTileKeys - 1 <= pos_lo &&
                       (p.window_left < 0 || pos_hi - j0 <= p.window_left);
    if (whole && plain_scores) {
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] *= scale_log2;
      }
    } else if (whole && capped && p.pos_encoding != 2) {
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = soft_capped(s[n][e] * p.sm_scale, p.soft_cap, cap_k) * kLog2e;
      }
    } else {
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          const std::int64_t j = j0 + n * 8 + 2 * t4 + (e & 1);
          float x = s[n][e] * p.sm_scale;
          if (capped) x = soft_capped(x, p.soft_cap, cap_k);
          if (p.pos_encoding == 2) x += slope[h] * static_cast<float>(j - pos[h]);
          const bool visible =
              whole || (j < rg.k_end && j <= pos[h] && (p.window_left < 0 || pos[h] - j <= p.window_left));
          s[n][e] = visible ? x * kLog2e : -INFINITY;
        }
      }
    }

    // Online softmax for rows g (h = 0) and g + 8 (h = 1); a row is spread over 4 lanes.
    // Row h's update given its tile max mx (over the row's 4 lanes): the new running max,
    // the scores as probabilities, this lane's share of the row sum; returns the rescale.
    auto update_row = [&](int h, float mx) {
      const float m_new = fmaxf(m[h], mx);
      const float base = softmax_base(m_new);  // all masked so far: every p is 0
      const float alpha = exp2f(m[h] - base);
      m[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[n][e] = exp2f(s[n][e] - base);
          sum += s[n][e];
        }
      }
      l[h] = l[h] * alpha + sum;  // this lane's share; the 4 lanes of a row add up at the end
      return alpha;
    };
    auto tile_max = [&](int h) {  // this lane's 4 scores of row h
      return fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
    };
    // Both rows' tile maxima first, their shuffles in flight together, then one warp vote for
    // both rescales: with a vote and branch per row, row 0's kept row 1's shuffles waiting
    // (Nsight Compute, fp8 64 x 4096: the max after each shuffle ~7% of the stall samples;
    // A/B history/ab-decode-softmax-both-rows-8a9062a.txt: 0.96-0.99x at every shape). The
    // running max rarely moves after the first tiles, so the rescale is usually skipped (a
    // vote costs less than 2 * D / 8 multiplies); a rescale by alpha == 1 changes nothing.
    float mx[2] = {tile_max(0), tile_max(1)};
#pragma unroll
    for (int xm = 1; xm <= 2; xm <<= 1) {
#pragma unroll
      for (int h = 0; h < 2; ++h) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], xm));
    }
    const float alpha[2] = {update_row(0, mx[0]), update_row(1, mx[1])};
    if (!__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) {
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e >> 1];
      }
    }

    // P as the A operand (the accumulator layout of two n-tiles is the A layout of one k-step),
    // high part and remainder; with fp8 KV the f16 high part only, as FlashInfer's f16 P
    // (2^-11 relative, far below the steps of the fp8 values themselves, 2^-4 and 2^-3):
    // half the PV MMAs.
    constexpr bool kHighOnly = kFp8;
    // A register i holds row half i & 1 of n-tile i >> 1: s[i >> 1][2 * (i & 1) .. + 1].
    std::uint32_t ph[4], pl[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float r0, r1, q0, q1;
      ph[i] = tc::pack2<MT>(s[i >> 1][2 * (i & 1)], s[i >> 1][2 * (i & 1) + 1], r0, r1);
      if constexpr (!kHighOnly) pl[i] = tc::pack2<MT>(r0, r1, q0, q1);
    }

    // O (16 x D) += P V, two n-tiles per transposed ldmatrix.
#pragma unroll
    for (int n2 = 0; n2 < kNTiles / 2; ++n2) {
      std::uint32_t bv[4];
      tc::ldsm_x4_trans(bv, vt + a_off(n2));
      tc::mma<MT>(o[2 * n2], ph, bv[0], bv[1]);
      tc::mma<MT>(o[2 * n2 + 1], ph, bv[2], bv[3]);
      if constexpr (!kHighOnly) {
        tc::mma<MT>(o[2 * n2], pl, bv[0], bv[1]);
        tc::mma<MT>(o[2 * n2 + 1], pl, bv[2], bv[3]);
      }
    }
  }
  detail::cp_async_wait<0>();

  // Merge the four warps' states. Row sums first add up over the 4 lanes of a row.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  if (t4 == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sml[(warp * kRowBlock + g + 8 * h) * 2] = m[h];
      sml[(warp * kRowBlock + g + 8 * h) * 2 + 1] = l[h];
    }
  }
  __syncthreads();  // every warp is past its last tile: the K/V region becomes the merge buffer
  auto row_max = [&](int r) {
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) mm = fmaxf(mm, sml[(w * kRowBlock + r) * 2]);
    return softmax_base(mm);
  };
  float* red = reinterpret_cast<float*>(skv);  // [warp][row][D]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const float f = exp2f(m[h] - row_max(r));
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      *reinterpret_cast<float2*>(red + (warp * kRowBlock + r) * D + n * 8 + 2 * t4) =
          make_float2(o[n][2 * h] * f, o[n][2 * h + 1] * f);
    }
  }
  __syncthreads();
  // With a cluster merge the CTA's normalised partial rows stay in shared memory: over warp
  // 0's slice of `red` (each (row, column) pair is read and then written by one thread) and,
  // for the LSE, over the page-id ring (idle since the last tile).
  float* cluster_lse = reinterpret_cast<float*>(spid);
  for (int idx = tid; idx < rows * (D / 2); idx += kTcThreads) {
    const int r = idx / (D / 2), c = (idx % (D / 2)) * 2;
    const float mm = row_max(r);
    float ll = 0.f, x = 0.f, y = 0.f;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) {
      ll += sml[(w * kRowBlock + r) * 2 + 1] * exp2f(sml[(w * kRowBlock + r) * 2] - mm);
      const float2 v = *reinterpret_cast<const float2*>(red + (w * kRowBlock + r) * D + c);
      x += v.x;
      y += v.y;
    }
    if (p.cluster_merge) {
      const float inv = ll > 0.f ? 1.f / ll : 0.f;
      *reinterpret_cast<float2*>(red + r * D + c) = make_float2(x * inv, y * inv);
      if (c == 0) cluster_lse[r] = row_lse(mm, ll);
      continue;
    }
    const RowOut<T> ro = row_out(p, b, split, kv_head, row0 + r, D, mm, ll);
    if (ro.partial) {
      *reinterpret_cast<float2*>(ro.partial + c) = make_float2(x * ro.scale, y * ro.scale);
    } else {
      ro.out[c] = from_f32<T>(x * ro.scale);
      ro.out[c + 1] = from_f32<T>(y * ro.scale);
    }
    if (ro.lse_at && c == 0) *ro.lse_at = ro.lse;
  }
  if (p.cluster_merge) {
    merge_splits_in_cluster(p, work, red, cluster_lse, D);
  } else if (p.arrivals && p.splits > 1 && split >= 0) {
    merge_if_last_split(p, work, D);
  }
#endif
}

template <typename T, typename KVT, int D>
__global__ void __launch_bounds__(kTcThreads, D <= 64 ? 3 : (D <= 128 ? 2 : 1))
    decode_tc_kernel(const __grid_constant__ DecodeParams<T, KVT> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  for_each_work_entry(p, [&](const CtaWork& work) { decode_tc_piece<T, KVT, D>(p, work); });
#endif
}

}  // namespace aotinfer::attention
