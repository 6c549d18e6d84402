#include "moe/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/host_values.h"
#include "moe/order_key.h"

namespace rudnn::moe::reference {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using common::load_value;
using common::store_value;

// v as stored in `dtype` and read back (through FP32, as the kernels round).
double stored(DType dtype, double v) {
  switch (dtype) {
    case DType::f32:
      return static_cast<float>(v);
    case DType::f16:
      return static_cast<float>(half(static_cast<float>(v)));
    case DType::bf16:
      return static_cast<float>(bfloat16(static_cast<float>(v)));
    default:
      return v;
  }
}

// The best key ranked strictly below `below` among keys[0..n) (kNoKey if none).
uint64_t best_below(const std::vector<uint64_t>& keys, uint64_t below) {
  uint64_t best = kNoKey;
  for (uint64_t k : keys)
    if (k < below && k > best) best = k;
  return best;
}

float sigmoid_f32(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void route_softmax(const RouteSoftmax& p) {
  const int64_t e_count = p.experts, k = p.top_k;
  std::vector<uint64_t> keys(static_cast<size_t>(e_count));
  std::vector<double> x(static_cast<size_t>(e_count));
  for (int64_t t = 0; t < p.tokens; ++t) {
    double max = -std::numeric_limits<double>::infinity();
    bool undefined = false;  // NaN, +inf, or only -inf: no probabilities
    for (int64_t e = 0; e < e_count; ++e) {
      x[e] = load_value(p.dtype, p.logits, t * e_count + e);
      if (std::isnan(x[e]) || x[e] == std::numeric_limits<double>::infinity()) undefined = true;
      if (x[e] > max) max = x[e];
      // Ranked as FP32, the precision the kernels compare in (F64 logits round here only).
      keys[e] = order_key(static_cast<float>(x[e]), static_cast<uint32_t>(e));
    }
    if (max == -std::numeric_limits<double>::infinity()) undefined = true;
    double sum = 0.0;
    if (!undefined)
      for (int64_t e = 0; e < e_count; ++e) sum += std::exp(x[e] - max);
    std::vector<double> w(static_cast<size_t>(k));
    double selected_sum = 0.0;
    uint64_t prev = ~uint64_t{0};
    for (int64_t j = 0; j < k; ++j) {
      prev = best_below(keys, prev);
      const uint32_t id = key_id(prev);
      p.indices[t * k + j] = id;
      w[j] = undefined ? kNaN : std::exp(x[id] - max) / sum;
      selected_sum += w[j];
    }
    for (int64_t j = 0; j < k; ++j)
      store_value(p.dtype, p.weights, t * k + j, p.renormalize ? w[j] / selected_sum : w[j]);
  }
}

void route_sigmoid_grouped(const RouteSigmoidGrouped& p) {
  const int64_t e_count = p.experts, k = p.top_k, g_count = p.groups;
  const int64_t per_group = e_count / g_count;
  std::vector<float> corrected(static_cast<size_t>(e_count));
  std::vector<double> x(static_cast<size_t>(e_count));
  std::vector<uint64_t> group_keys(static_cast<size_t>(g_count));
  std::vector<uint64_t> expert_keys;
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int64_t e = 0; e < e_count; ++e) {
      x[e] = load_value(p.dtype, p.logits, t * e_count + e);
      // Selection in FP32, as specified (and as the kernels rank).
      corrected[e] = sigmoid_f32(static_cast<float>(x[e])) + (p.bias ? p.bias[e] : 0.0f);
    }
    for (int64_t g = 0; g < g_count; ++g) {
      std::vector<uint64_t> members;
      for (int64_t i = 0; i < per_group; ++i) {
        const int64_t e = g * per_group + i;
        members.push_back(order_key(corrected[e], static_cast<uint32_t>(e)));
      }
      const uint64_t first = best_below(members, ~uint64_t{0});
      float score = corrected[key_id(first)];
      if (p.group_top_two) score += corrected[key_id(best_below(members, first))];
      group_keys[g] = order_key(score, static_cast<uint32_t>(g));
    }
    std::vector<bool> group_selected(static_cast<size_t>(g_count), false);
    uint64_t prev = ~uint64_t{0};
    for (int64_t j = 0; j < p.selected_groups; ++j) {
      prev = best_below(group_keys, prev);
      group_selected[key_id(prev)] = true;
    }
    expert_keys.clear();
    for (int64_t e = 0; e < e_count; ++e)
      if (group_selected[e / per_group])
        expert_keys.push_back(order_key(corrected[e], static_cast<uint32_t>(e)));
    std::vector<double> w(static_cast<size_t>(k));
    double selected_sum = 0.0;
    prev = ~uint64_t{0};
    for (int64_t j = 0; j < k; ++j) {
      prev = best_below(expert_keys, prev);
      const uint32_t id = key_id(prev);
      p.indices[t * k + j] = id;
      w[j] = 1.0 / (1.0 + std::exp(-x[id]));
      selected_sum += w[j];
    }
    for (int64_t j = 0; j < k; ++j) {
      const double v = p.renormalize ? w[j] / selected_sum : w[j];
      store_value(p.dtype, p.weights, t * k + j, v * p.scale);
    }
  }
}

void dispatch(const Dispatch& p) {
  const int64_t slots = p.tokens * p.top_k;
  std::vector<int64_t> next(static_cast<size_t>(p.experts + 1), 0);
  for (int64_t s = 0; s < slots; ++s) ++next[p.indices[s] + 1];
  for (int64_t e = 0; e < p.experts; ++e) next[e + 1] += next[e];
  for (int64_t e = 0; e <= p.experts; ++e) p.offsets[e] = static_cast<int32_t>(next[e]);
  // Slots in token order, each to the next free row of its expert: a stable sort.
  const size_t row_bytes = static_cast<size_t>(p.hidden) * dtype_size(p.dtype);
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t row = next[p.indices[s]]++;
    const int64_t token = s / p.top_k;
    p.row_of_slot[s] = static_cast<int32_t>(row);
    p.token_of_row[row] = static_cast<int32_t>(token);
    std::memcpy(static_cast<char*>(p.rows) + row * row_bytes,
                static_cast<const char*>(p.input) + token * row_bytes, row_bytes);
  }
}

void combine(const Combine& p) {
  std::vector<double> acc(static_cast<size_t>(p.hidden));
  for (int64_t t = 0; t < p.tokens; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < p.top_k; ++j) {
      const double w = p.weights ? load_value(p.weight_dtype, p.weights, t * p.top_k + j) : 1.0;
      const int64_t row = p.row_of_slot[t * p.top_k + j];
      for (int64_t h = 0; h < p.hidden; ++h)
        acc[h] += w * load_value(p.dtype, p.expert_out, row * p.hidden + h);
    }
    for (int64_t h = 0; h < p.hidden; ++h) store_value(p.dtype, p.out, t * p.hidden + h, acc[h]);
  }
}

void experts_forward(const ExpertsForward& p) {
  const int64_t H = p.hidden, I = p.inter;
  std::vector<double> x(static_cast<size_t>(H)), act(static_cast<size_t>(I));
  for (int64_t e = 0; e < p.experts; ++e) {
    const int64_t gate0 = e * I * H, down0 = e * H * I;
    for (int64_t r = p.offsets[e]; r < p.offsets[e + 1]; ++r) {
      for (int64_t h = 0; h < H; ++h) x[h] = load_value(p.dtype, p.x, r * H + h);
      for (int64_t i = 0; i < I; ++i) {
        double g = 0.0, u = 0.0;
        for (int64_t h = 0; h < H; ++h) {
          g += load_value(p.dtype, p.gate, gate0 + i * H + h) * x[h];
          u += load_value(p.dtype, p.up, gate0 + i * H + h) * x[h];
        }
        act[i] = g / (1.0 + std::exp(-g)) * u;
        // The training cache, as stored (its values do not feed this definition).
        if (p.gate_pre) store_value(p.dtype, p.gate_pre, r * I + i, g);
        if (p.up_pre) store_value(p.dtype, p.up_pre, r * I + i, u);
        if (p.act) store_value(p.dtype, p.act, r * I + i, act[i]);
      }
      for (int64_t h = 0; h < H; ++h) {
        double y = 0.0;
        for (int64_t i = 0; i < I; ++i)
          y += load_value(p.dtype, p.down, down0 + h * I + i) * act[i];
        store_value(p.dtype, p.y, r * H + h, y);
      }
    }
  }
}

void experts_backward(const ExpertsBackward& p) {
  const int64_t H = p.hidden, I = p.inter;
  std::vector<double> dgate(static_cast<size_t>(p.experts * I * H), 0.0), dup(dgate.size(), 0.0),
      ddown(dgate.size(), 0.0);
  std::vector<double> x(static_cast<size_t>(H)), dy(x.size()), g(static_cast<size_t>(I)),
      u(g.size()), act(g.size()), dg(g.size()), du(g.size());
  for (int64_t e = 0; e < p.experts; ++e) {
    const int64_t gate0 = e * I * H, down0 = e * H * I;
    for (int64_t r = p.offsets[e]; r < p.offsets[e + 1]; ++r) {
      for (int64_t h = 0; h < H; ++h) {
        x[h] = load_value(p.dtype, p.x, r * H + h);
        dy[h] = load_value(p.dtype, p.dy, r * H + h);
      }
      for (int64_t i = 0; i < I; ++i) {
        g[i] = u[i] = 0.0;
        for (int64_t h = 0; h < H; ++h) {
          g[i] += load_value(p.dtype, p.gate, gate0 + i * H + h) * x[h];
          u[i] += load_value(p.dtype, p.up, gate0 + i * H + h) * x[h];
        }
        const double s = 1.0 / (1.0 + std::exp(-g[i]));
        act[i] = g[i] * s * u[i];
        double dact = 0.0;
        for (int64_t h = 0; h < H; ++h)
          dact += dy[h] * load_value(p.dtype, p.down, down0 + h * I + i);
        dg[i] = dact * u[i] * s * (1.0 + g[i] * (1.0 - s));
        du[i] = dact * g[i] * s;
      }
      for (int64_t h = 0; h < H; ++h) {
        double dx = 0.0;
        for (int64_t i = 0; i < I; ++i) {
          dx += dg[i] * load_value(p.dtype, p.gate, gate0 + i * H + h) +
                du[i] * load_value(p.dtype, p.up, gate0 + i * H + h);
          dgate[gate0 + i * H + h] += dg[i] * x[h];
          dup[gate0 + i * H + h] += du[i] * x[h];
          ddown[down0 + h * I + i] += dy[h] * act[i];
        }
        if (p.dx) store_value(p.dtype, p.dx, r * H + h, dx);
      }
    }
  }
  for (size_t i = 0; i < dgate.size(); ++i) {
    if (p.dgate) p.dgate[i] = static_cast<float>(dgate[i]);
    if (p.dup) p.dup[i] = static_cast<float>(dup[i]);
    if (p.ddown) p.ddown[i] = static_cast<float>(ddown[i]);
  }
}

void combine_backward(const CombineBackward& p) {
  // Serial and Plane define the same sums; float64 here.
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int64_t j = 0; j < p.top_k; ++j) {
      const double w = load_value(p.weight_dtype, p.weights, t * p.top_k + j);
      const int64_t row = p.row_of_slot[t * p.top_k + j];
      double dot = 0.0;
      for (int64_t h = 0; h < p.hidden; ++h) {
        const double g = load_value(p.dtype, p.grad_out, t * p.hidden + h);
        dot += g * load_value(p.dtype, p.expert_out, row * p.hidden + h);
        store_value(p.dtype, p.dexpert, row * p.hidden + h, w * g);
      }
      p.dweights[t * p.top_k + j] = static_cast<float>(dot);
    }
  }
}

namespace {

int64_t load_index(DType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case DType::u32:
      return static_cast<const uint32_t*>(data)[i];
    case DType::i32:
      return static_cast<const int32_t*>(data)[i];
    default:
      return static_cast<const int64_t*>(data)[i];
  }
}

}  // namespace

void selected_router(const SelectedRouter& p) {
  const int64_t E = p.experts, k = p.top_k;
  std::vector<double> x(static_cast<size_t>(E)), prob(static_cast<size_t>(E)),
      q(static_cast<size_t>(k));
  std::vector<int64_t> id(static_cast<size_t>(k));
  for (int64_t t = 0; t < p.tokens; ++t) {
    bool valid = true;
    for (int64_t j = 0; j < k; ++j) {
      id[j] = load_index(p.index_dtype, p.indices, t * k + j);
      valid = valid && id[j] >= 0 && id[j] < E;
    }
    for (int64_t e = 0; e < E; ++e) x[e] = load_value(p.dtype, p.logits, t * E + e);
    if (!p.sigmoid) {
      double max = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (double v : x) max = std::max(max, v);
      for (double v : x) sum += std::exp(v - max);
      for (int64_t e = 0; e < E; ++e) prob[e] = std::exp(x[e] - max) / sum;
      // NaN anywhere, +inf or only -inf: NaN probabilities (std::max skips NaN; exp(NaN) not).
      for (double v : x)
        if (std::isnan(v)) std::fill(prob.begin(), prob.end(), kNaN);
    }
    double selected_sum = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      q[j] = !valid ? kNaN : p.sigmoid ? 1.0 / (1.0 + std::exp(-x[id[j]])) : prob[id[j]];
      selected_sum += q[j];
    }
    const double norm = p.renormalize ? selected_sum : 1.0;
    if (!p.grad_weights) {
      for (int64_t j = 0; j < k; ++j)
        p.weights[t * k + j] = static_cast<float>(p.scale * q[j] / norm);
      continue;
    }
    // dL/dq_j = a_j; then through the softmax or the sigmoid.
    double gq = 0.0;
    for (int64_t j = 0; j < k; ++j) gq += static_cast<double>(p.grad_weights[t * k + j]) * q[j];
    std::vector<double> dx(static_cast<size_t>(E), 0.0);
    double c = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      const double g = p.grad_weights[t * k + j];
      const double a = p.renormalize ? p.scale * (g / norm - gq / (norm * norm)) : p.scale * g;
      if (!valid) continue;
      if (p.sigmoid) {
        dx[id[j]] += a * q[j] * (1.0 - q[j]);
      } else {
        dx[id[j]] += a * q[j];
        c += a * q[j];
      }
    }
    for (int64_t e = 0; e < E; ++e) {
      const double v = !valid ? kNaN : p.sigmoid ? dx[e] : dx[e] - prob[e] * c;
      store_value(p.dtype, p.dlogits, t * E + e, v);
    }
  }
}

void native_swiglu(const NativeSwiGlu& p) {
  for (int64_t i = 0; i < p.count; ++i) {
    const double g = load_value(p.dtype, p.gate, i), u = load_value(p.dtype, p.up, i);
    const double s = 1.0 / (1.0 + std::exp(-g));
    // The stored SiLU: rounded to the dtype (F64: exact), as the forward multiplies it.
    const double silu_stored = stored(p.dtype, g * s);
    if (p.out) {
      store_value(p.dtype, p.out, i, silu_stored * u);
      continue;
    }
    const double d = load_value(p.dtype, p.grad, i);
    if (p.dup) store_value(p.dtype, p.dup, i, d * silu_stored);
    if (p.dgate) store_value(p.dtype, p.dgate, i, d * u * s * (1.0 + g * (1.0 - s)));
  }
}

void expert_projection(const ExpertProjection& p) {
  const int64_t N = p.n, K = p.k;
  std::vector<double> dw(p.dweights ? static_cast<size_t>(p.experts * N * K) : 0, 0.0);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t local = static_cast<int64_t>(p.ids[r]) - p.expert_start;
    const bool valid = local >= 0 && local < p.experts;
    const int64_t w0 = valid ? local * N * K : 0;
    if (p.y) {
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0.0;
        for (int64_t kk = 0; valid && kk < K; ++kk)
          acc += load_value(p.dtype, p.weights, w0 + n * K + kk) *
                 load_value(p.dtype, p.x, r * K + kk);
        store_value(p.dtype, p.y, r * N + n, valid ? acc : kNaN);
      }
      continue;
    }
    if (p.dx) {
      for (int64_t kk = 0; kk < K; ++kk) {
        double acc = 0.0;
        for (int64_t n = 0; valid && n < N; ++n)
          acc += load_value(p.dtype, p.dy, r * N + n) *
                 load_value(p.dtype, p.weights, w0 + n * K + kk);
        store_value(p.dtype, p.dx, r * K + kk, valid ? acc : kNaN);
      }
    }
    if (p.dweights && valid) {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t kk = 0; kk < K; ++kk)
          dw[w0 + n * K + kk] +=
              load_value(p.dtype, p.dy, r * N + n) * load_value(p.dtype, p.x, r * K + kk);
    }
  }
  for (size_t i = 0; i < dw.size(); ++i) p.dweights[i] = static_cast<float>(dw[i]);
}

}  // namespace rudnn::moe::reference
