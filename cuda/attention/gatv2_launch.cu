// Entry points of the GATv2 attention forward and attention weights:
// checks, then attention_forward_launch.cuh with Gatv2Family (its rows by
// gatv2_streamed_rows.cuh where that kernel serves the shape).
#include "../common/device_guard.h"
#include "attention_forward_launch.cuh"
#include "gatv2_dispatch.cuh"
#include "gatv2_kernel.cuh"
#include "gatv2_streamed_rows.cuh"

namespace pygio {
namespace {

int check_forward(const pygio_gatv2_params& p, const char* entry) {
  PYGIO_TRY(gatv2::check_inputs(p, entry));
  PYGIO_TRY(gatv2::check_dropout(p.dropout_p, entry));
  return attention::check_forward_outputs(p, entry);
}

int check_alpha(const pygio_gatv2_alpha_params& p, const char* entry) {
  PYGIO_TRY(gatv2::check_inputs(p, entry));
  return attention::check_alpha_outputs(p, entry);
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_gatv2_workspace_size(const pygio_gatv2_params* params, size_t* bytes) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  PYGIO_TRY(gatv2::check_inputs(*params, __func__));
  PYGIO_CHECK_ARG(params->max_hubs >= 0,
                  entry_message(__func__, "max_hubs must be non-negative"));
  *bytes = attention::forward_workspace_bytes(*params);
  return ok();
}

extern "C" int pygio_gatv2(const pygio_gatv2_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_forward(*params, __func__));
  const pygio_gatv2_params& p = *params;
  if (p.a.num_rows == 0) return ok();
  gatv2::Plan plan;
  PYGIO_TRY(gatv2::make_plan(p.dtype, p.heads, p.channels, gatv2::kGatv2WidePieces,
                             {p.x_l_row_stride, p.x_r_row_stride, p.heads * p.channels},
                             {p.x_l, p.x_r, p.edge, p.out}, __func__, &plan));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_TRY((gatv2::dispatch<gatv2::kGatv2NoEdgePieces, gatv2::kGatv2NoEdgeSingles>(
      p, plan, [&](auto traits, const GatShape& s) {
        using Traits = decltype(traits);
        return attention::launch_forward<Gatv2Family, Traits>(
            p, s, stream, [&](const GatHubs& hubs) {
              if constexpr (kStreamTraits<Traits>) {
                if (streams_rows<Traits>(p, s))
                  return launch_streamed_rows<Traits>(p, s, hubs, stream);
              }
              return attention::launch_rows<Gatv2Family, Traits>(p, s, hubs, stream);
            });
      })));
  return ok();
}

extern "C" int pygio_gatv2_alpha(const pygio_gatv2_alpha_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_alpha(*params, __func__));
  const pygio_gatv2_alpha_params& p = *params;
  if (p.a.nnz == 0) return ok();
  gatv2::Plan plan;
  PYGIO_TRY(gatv2::make_plan(p.dtype, p.heads, p.channels, gatv2::kGatv2WidePieces,
                             {p.x_l_row_stride, p.x_r_row_stride, p.heads * p.channels},
                             {p.x_l, p.x_r, p.edge}, __func__, &plan));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_TRY((gatv2::dispatch<gatv2::kGatv2NoEdgePieces, gatv2::kGatv2NoEdgeSingles>(
      p, plan, [&](auto traits, const GatShape& s) {
        return attention::launch_alpha<Gatv2Family, decltype(traits)>(p, s, stream);
      })));
  return ok();
}
