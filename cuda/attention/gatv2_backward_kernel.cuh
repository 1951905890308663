// GATv2 attention backward (contract: pygio_gatv2_backward). With
// G[i,h] = <grad_out[i,h], out[i,h]>, alpha recomputed from lse,
//   ds[e,h] = alpha[e,h] * (keep(e,h)/(1-p) * <grad_out[i,h], x_l[j,h]> - G[i,h]),
//   dz[e,h,:] = ds[e,h] * att[h,:] * leaky_relu'(z[e,h,:]):
// the destination pass (a warp per row of a) sums dz into grad_x_r, writes
// grad_edge and accumulates grad_att; the source pass (a warp per row of
// a_t) sums keep/(1-p) * alpha * grad_out[i] + dz into grad_x_l. Both
// recompute the scores; only G (per node and head) passes between them.
#pragma once

#include "gatv2_kernel.cuh"

namespace pygio {

// The softmax-gradient terms of one entry from its recomputed score.
struct EntryGrad {
  float alpha_factor;  // keep/(1-p) * alpha: the weight of grad_out in grad_x_l
  float ds;            // d loss / d score
};

__device__ __forceinline__ EntryGrad entry_grad(float score, float lse, float g, float dot,
                                                float factor) {
  const float alpha = expf(score - lse);
  return EntryGrad{factor * alpha, alpha * (factor * dot - g)};
}

// Destination pass: a warp per row of a (grid-stride, every head in turn).
// grad_att partials are summed in shared memory (att_acc, heads * channels
// floats) per block, then added to grad_att once per block.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    gatv2_backward_rows_kernel(pygio_gatv2_backward_params p, GatShape s, float* g_out,
                               bool shared_att) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems;
  extern __shared__ float shared_att_acc[];
  float* att_acc = shared_att ? shared_att_acc : p.grad_att;
  if (shared_att) {
    for (int64_t k = threadIdx.x; k < s.width(); k += blockDim.x) shared_att_acc[k] = 0.f;
    __syncthreads();
  }
  const auto* rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t row = blockIdx.x * Traits::kWarpsPerBlock + threadIdx.x / kWarpSize;
       row < p.a.num_rows; row += warps) {
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t node = row * s.width() + h * s.channels;
      float att[E], xr[E], dout[E], out[E];
      load_att<Traits>(p.att + h * s.channels, s, lane, att);
      load_slice<Traits>(static_cast<const scalar_t*>(p.x_r) + row * p.x_r_row_stride +
                             h * s.channels, s, lane, xr);
      load_slice<Traits>(static_cast<const scalar_t*>(p.grad_out) + node, s, lane, dout);
      load_slice<Traits>(static_cast<const scalar_t*>(p.out) + node, s, lane, out);
      float partial = 0.f;
#pragma unroll
      for (int k = 0; k < E; ++k) partial += dout[k] * out[k];
      const float g = group_sum(partial, s.layout);
      const float lse = p.lse[row * s.heads + h];
      float dxr[E] = {}, datt[E] = {};
      for_each_entry<Traits>(p, s, lane, h, begin, end, att, xr,
                             [&](int64_t e, bool real, const float (&xl)[E], const float (&z)[E],
                                 float score) {
        float dot = 0.f;
#pragma unroll
        for (int k = 0; k < E; ++k) dot += dout[k] * xl[k];
        dot = group_sum(dot, s.layout);
        if (!real) return;
        const EntryGrad d = entry_grad(score, lse, g, dot,
                                       dropout_factor(p.seed, e, h, p.dropout_p));
        float dz[E];
#pragma unroll
        for (int k = 0; k < E; ++k) {
          dz[k] = d.ds * att[k] * leaky_relu_grad(z[k], p.negative_slope);
          dxr[k] += dz[k];
          datt[k] += d.ds * leaky_relu(z[k], p.negative_slope);
        }
        if (p.grad_edge != nullptr)
          store_slice<Traits>(static_cast<scalar_t*>(p.grad_edge) + e * s.width() +
                                  h * s.channels, s, lane, dz);
      });
      sum_over_groups(dxr, s.layout);
      sum_over_groups(datt, s.layout);
      if (s.layout.sub_group(lane) == 0) {
        store_slice<Traits>(static_cast<scalar_t*>(p.grad_x_r) + node, s, lane, dxr);
#pragma unroll
        for (int q = 0; q < Traits::kPieces; ++q) {
          const int64_t c = piece_channel<Traits>(s, lane, q);
          if (c < 0) continue;
#pragma unroll
          for (int i = 0; i < Traits::kVec; ++i)
            atomicAdd(att_acc + h * s.channels + c + i, datt[q * Traits::kVec + i]);
        }
      }
      if (lane == 0) g_out[row * s.heads + h] = g;
    }
  }
  if (shared_att) {
    __syncthreads();
    for (int64_t k = threadIdx.x; k < s.width(); k += blockDim.x)
      atomicAdd(p.grad_att + k, shared_att_acc[k]);
  }
}

// Source pass: a warp per row j of a_t (grid-stride, every head in turn):
// grad_x_l[j] = sum over j's entries e = (j -> i) of
// keep/(1-p) * alpha[e] * grad_out[i] + dz[e].
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    gatv2_backward_sources_kernel(pygio_gatv2_backward_params p, GatShape s, const float* g_in) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems;
  const auto* rowptr_t = static_cast<const index_t*>(p.a_t.rowptr);
  const auto* col_t = static_cast<const index_t*>(p.a_t.col);
  const auto* perm_t = static_cast<const index_t*>(p.perm_t);
  const int lane = threadIdx.x % kWarpSize;
  const int groups = s.layout.sub_groups();
  const int group = s.layout.sub_group(lane);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t src = blockIdx.x * Traits::kWarpsPerBlock + threadIdx.x / kWarpSize;
       src < p.a_t.num_rows; src += warps) {
    const int64_t begin = rowptr_t[src], end = rowptr_t[src + 1];
    for (int64_t h = 0; h < s.heads; ++h) {
      float att[E], xl[E] = {}, dxl[E] = {};
      load_att<Traits>(p.att + h * s.channels, s, lane, att);
      if (end > begin)  // x_l may be NULL without entries
        load_slice<Traits>(static_cast<const scalar_t*>(p.x_l) + src * p.x_l_row_stride +
                               h * s.channels, s, lane, xl);
      // Every lane of the warp takes the same number of steps (shuffles).
      for (int64_t base = begin; base < end; base += groups) {
        const int64_t t = base + group;
        const bool real = t < end;
        const int64_t dst = real ? static_cast<int64_t>(col_t[t]) : 0;
        const int64_t e = real ? static_cast<int64_t>(perm_t[t]) : 0;
        float z[E], dout[E];
        if (real) {
          load_slice<Traits>(static_cast<const scalar_t*>(p.x_r) + dst * p.x_r_row_stride +
                                 h * s.channels, s, lane, z);
          load_slice<Traits>(static_cast<const scalar_t*>(p.grad_out) + dst * s.width() +
                                 h * s.channels, s, lane, dout);
          if (p.edge != nullptr) {
            float edge[E];
            load_slice<Traits>(static_cast<const scalar_t*>(p.edge) + e * s.width() +
                                   h * s.channels, s, lane, edge);
#pragma unroll
            for (int k = 0; k < E; ++k) z[k] += edge[k];
          }
        } else {
#pragma unroll
          for (int k = 0; k < E; ++k) z[k] = dout[k] = 0.f;
        }
        float dot = 0.f;
#pragma unroll
        for (int k = 0; k < E; ++k) {
          z[k] += xl[k];
          dot += dout[k] * xl[k];
        }
        const float score = entry_score<Traits>(z, att, p.negative_slope, s.layout);
        dot = group_sum(dot, s.layout);
        if (!real) continue;
        const EntryGrad d = entry_grad(score, p.lse[dst * s.heads + h], g_in[dst * s.heads + h],
                                       dot, dropout_factor(p.seed, e, h, p.dropout_p));
#pragma unroll
        for (int k = 0; k < E; ++k)
          dxl[k] += d.alpha_factor * dout[k] +
                    d.ds * att[k] * leaky_relu_grad(z[k], p.negative_slope);
      }
      sum_over_groups(dxl, s.layout);
      if (group == 0)
        store_slice<Traits>(static_cast<scalar_t*>(p.grad_x_l) + src * s.width() +
                                h * s.channels, s, lane, dxl);
    }
  }
}

}  // namespace pygio
