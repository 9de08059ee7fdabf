// Host launcher for softmax: checks the views, picks the dtype, vector width and kernel, launches.
// Variants built: logits float32, float16, bfloat16, each as the one-CTA-per-row kernel and, for
// sm_90+, the split kernel pair, the split kernel in clusters and the cluster kernel with
// 8/16/32/64 elements per thread (see kernel_list.h).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "../common/device_guard.h"
#include "../common/env_switch.h"
#include "../common/launch_cache.h"
#include "../common/status.h"
#include "../common/view_checks.h"
#include "sampling_launchers.h"
#include "softmax.cuh"
#include "softmax_cluster.cuh"
#include "softmax_split.cuh"
#include "softmax_split_cluster.cuh"

namespace aotinfer::sampling {
namespace {

// Rows shorter than this take the one-CTA-per-row kernel. The threshold is the one the cluster
// kernel had; the split pair has not been measured on shorter rows (the benchmark's shortest
// is 32000).
constexpr std::int64_t kSplitMinVocab = 16384;

// The one-launch cluster form (softmax_split_cluster.cuh) serves grids of more than this many
// CTAs per SM. Swept at 3fd4926 on an H200 (benchmarks/results/history/sweep-softmax-3fd4926.txt,
// per call in a graph, bf16, 32 KB chunks): from 512 CTAs on it beat the pair everywhere (64 x
// 128256 20.0 us against 22.5, 128 x 128256 33.3 against 38.0, 512 x 128256 116.5 against
// 143.1, 1024 x 32000 58.4 against 76.5); at 256 CTAs it lost at 32 x 128256 (12.6 against
// 11.6) and won by 4% at 128 x 32000 (11.2 against 11.7).
constexpr int kClusterMinCtasPerSm = 2;

// AOTINFER_SOFTMAX_SPLIT_CHUNK_KB=4|8|16|32 pins the split pair's chunk size (benchmarks compare
// them); unset: split_softmax_chunk_elems chooses.
int pinned_split_chunk_kb() {
  const std::string v = env_choice("AOTINFER_SOFTMAX_SPLIT_CHUNK_KB", {"4", "8", "16", "32"});
  return v.empty() ? 0 : std::stoi(v);
}

template <typename T>
void run(const TensorView& logits, const TensorView& probs, const TensorView* temperature,
         float temperature_scalar, const TensorView& workspace, bool enable_pdl, cudaStream_t stream) {
  SoftmaxParams<T> p;
  p.logits = logits.ptr<const T>();
  p.probs = probs.ptr<float>();
  p.temperature_array = temperature ? temperature->ptr<const float>() : nullptr;
  p.temperature = temperature_scalar;
  p.rows = logits.size(0);
  p.vocab = logits.size(1);
  p.in_row_stride = logits.stride(0);
  p.out_row_stride = probs.stride(0);
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized = logits.data % 16 == 0 && probs.data % 16 == 0 &&
                          p.in_row_stride % kVec == 0 && p.out_row_stride % 4 == 0;
  DeviceGuard guard(logits.device);
  throw_on_cuda_error(guard.status(), "softmax", logits.device);
  int major = 0;
  throw_on_cuda_error(cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(&major, logits.device), "softmax",
                      logits.device);
  const int elems = cluster_softmax_elems(p.vocab);
  // AOTINFER_SOFTMAX_KERNEL=rowwise|cluster|split|split_cluster|split_cluster_regs pins one
  // kernel (benchmarks compare them; split_cluster_regs: the one-launch form's register form,
  // split_cluster its plain form); all but rowwise need sm_90 (the one-CTA-per-row kernel
  // serves otherwise).
  const std::string pinned = env_choice("AOTINFER_SOFTMAX_KERNEL",
                                        {"rowwise", "cluster", "split", "split_cluster", "split_cluster_regs", "auto"});
  const bool pinned_one = !pinned.empty() && pinned != "auto";
  // Measured on an H200 (benchmarks/results/history/softmax-3404dd5-ftz-write.md, per call in a
  // graph): the split pair beats the rowwise and cluster kernels at every benchmarked shape of
  // vocab 32000 and 128256, batch 1 to 512 (batch 1 x 128256: 4.1 us against the cluster
  // kernel's 9.4; 128 x 128256: 38 against the one-CTA-per-row kernel's 47), so the split
  // kernels serve every long row on sm_90+; the cluster kernel stays as a pinned alternative.
  // Of the two split forms, auto takes the one-launch cluster form where a row's chunks fit
  // one cluster and its grid has more than kClusterMinCtasPerSm CTAs per SM, in its register
  // form where register_form_serves says (softmax_split_cluster.cuh).
  const bool want_cluster = pinned == "cluster";
  const bool pinned_cluster_form = pinned == "split_cluster" || pinned == "split_cluster_regs";
  const bool want_split = pinned_one ? pinned == "split" || pinned_cluster_form : p.vocab >= kSplitMinVocab;
  if (major >= 9 && elems != 0 && want_cluster) {
    throw_on_cuda_error(softmax_cluster(p, elems, enable_pdl, stream), "softmax", logits.device);
    return;
  }
  if (major >= 9 && want_split) {
    int sms = 0;
    throw_on_cuda_error(cached_device_attribute<cudaDevAttrMultiProcessorCount>(&sms, logits.device), "softmax",
                        logits.device);
    const int pinned_kb = pinned_split_chunk_kb();
    const int cluster_chunk = split_cluster_chunk_elems(p.vocab, sizeof(T), pinned_kb);
    const std::int64_t cluster_ctas =
        cluster_chunk == 0 ? 0 : p.rows * ((p.vocab + cluster_chunk - 1) / cluster_chunk);
    const bool in_clusters = cluster_chunk != 0 && (pinned_one ? pinned_cluster_form
                                                                : cluster_ctas > kClusterMinCtasPerSm * sms);
    if (in_clusters) {
      int threads_per_sm = 0;
      throw_on_cuda_error(
          cached_device_attribute<cudaDevAttrMaxThreadsPerMultiProcessor>(&threads_per_sm, logits.device), "softmax",
          logits.device);
      const bool registers = pinned_one ? pinned == "split_cluster_regs"
                                        : register_form_serves(cluster_ctas, sms, threads_per_sm);
      throw_on_cuda_error(softmax_split_cluster(p, cluster_chunk, registers, enable_pdl, stream, logits.device),
                          "softmax", logits.device);
      return;
    }
    const int chunk = split_softmax_chunk_elems(p.rows, p.vocab, sizeof(T), sms, pinned_kb);
    auto* stats = reinterpret_cast<float2*>(workspace.ptr<float>());
    throw_on_cuda_error(softmax_split(p, stats, chunk, enable_pdl, stream), "softmax", logits.device);
    return;
  }
  throw_on_cuda_error(softmax(p, vectorized, enable_pdl, stream), "softmax", logits.device);
}

}  // namespace

void launch_softmax(const TensorView& logits, const TensorView& probs,
                    const TensorView* temperature, float temperature_scalar,
                    const TensorView& workspace, bool enable_pdl, std::uintptr_t stream) {
  check_rank(logits, 2, "softmax", "logits");
  check_rows_dense(logits, "softmax", "logits");
  check_same_shape(probs, logits, "softmax", "probs", "logits");
  check_dtype(probs, DType::kFloat32, "softmax", "probs");
  check_rows_dense(probs, "softmax", "probs");
  check_same_device(probs, logits, "softmax", "probs");
  if (temperature != nullptr) {
    check_rank(*temperature, 1, "softmax", "temperature");
    check_dtype(*temperature, DType::kFloat32, "softmax", "temperature");
    check_length(*temperature, logits.size(0), "softmax", "temperature");
    check_same_device(*temperature, logits, "softmax", "temperature");
    if (temperature->stride(0) != 1 && temperature->size(0) > 1) {
      fail_argument("softmax: temperature must be contiguous");
    }
  }
  check_rank(workspace, 1, "softmax", "workspace");
  check_dtype(workspace, DType::kFloat32, "softmax", "workspace");
  check_same_device(workspace, logits, "softmax", "workspace");
  if (workspace.stride(0) != 1 && workspace.size(0) > 1) fail_argument("softmax: workspace must be contiguous");
  // Checked whichever kernel runs, so that a short workspace fails the same way on every shape.
  const std::int64_t need = split_softmax_workspace_floats(logits.size(0), logits.size(1));
  if (workspace.size(0) < need) {
    fail_argument("softmax: workspace must hold at least " + std::to_string(need) + " floats, got " +
                  std::to_string(workspace.size(0)));
  }
  if (workspace.data % 8 != 0) fail_argument("softmax: workspace must be 8-byte aligned");
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (logits.dtype) {
    case DType::kFloat32: return run<float>(logits, probs, temperature, temperature_scalar, workspace, enable_pdl, s);
    case DType::kFloat16: return run<__half>(logits, probs, temperature, temperature_scalar, workspace, enable_pdl, s);
    case DType::kBFloat16:
      return run<__nv_bfloat16>(logits, probs, temperature, temperature_scalar, workspace, enable_pdl, s);
    default:
      fail_argument(std::string("softmax: logits must be float32, float16 or bfloat16, got ") +
                    dtype_name(logits.dtype));
  }
}

}  // namespace aotinfer::sampling
