#include "attention/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace rudnn::attn::reference {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double read_as_double(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(data)[index];
    case DType::f64:
      return static_cast<const double*>(data)[index];
    case DType::f16:
      return static_cast<float>(static_cast<const half*>(data)[index]);
    case DType::bf16:
      return static_cast<float>(static_cast<const bfloat16*>(data)[index]);
    case DType::boolean:
      return static_cast<const unsigned char*>(data)[index] != 0 ? 1.0 : 0.0;
    default:
      return 0.0;
  }
}

// The value stored in `dtype`: rounded to FP32 first (what the devices compute in), then to
// the dtype; F64 as is.
void write_from_double(void* data, DType dtype, int64_t index, double v) {
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(data)[index] = static_cast<float>(v);
      break;
    case DType::f64:
      static_cast<double*>(data)[index] = v;
      break;
    case DType::f16:
      static_cast<half*>(data)[index] = half(static_cast<float>(v));
      break;
    case DType::bf16:
      static_cast<bfloat16*>(data)[index] = bfloat16(static_cast<float>(v));
      break;
    default:
      break;
  }
}

// A [batch, seq, heads, dim] view of one dtype, read and written as doubles.
struct Rows {
  const void* data;
  void* out;
  DType dtype;
  int64_t batch_stride, seq_stride, head_stride;
  int64_t at(int64_t b, int64_t s, int64_t h) const {
    return b * batch_stride + s * seq_stride + h * head_stride;
  }
  double get(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return read_as_double(data, dtype, at(b, s, h) + d);
  }
  void set(int64_t b, int64_t s, int64_t h, int64_t d, double v) const {
    write_from_double(out, dtype, at(b, s, h) + d, v);
  }
};
Rows rows_of(const BshdIn& v, DType dtype) {
  return {v.data, nullptr, dtype, v.batch_stride, v.seq_stride, v.head_stride};
}
Rows rows_of(const BshdOut& v, DType dtype) {
  return {v.data, v.data, dtype, v.batch_stride, v.seq_stride, v.head_stride};
}

// Where one sequence's rows are: padded batches index their batch entry, varlen the packed
// rows from cu_seqlens (batch index 0 of the [total, H, D] view).
struct Sequence {
  int64_t view_batch = 0;  // the batch index in the views
  int64_t q_begin = 0, len_q = 0, k_begin = 0, len_k = 0;
};
Sequence sequence(const AttentionSizes& s, int64_t b) {
  Sequence q;
  if (!s.varlen) {
    q.view_batch = b;
    q.len_q = s.len_q;
    q.len_k = s.len_k;
    return q;
  }
  q.q_begin = s.cu_q[b];
  q.len_q = s.cu_q[b + 1] - s.cu_q[b];
  q.k_begin = s.cu_k[b];
  q.len_k = s.cu_k[b + 1] - s.cu_k[b];
  return q;
}

double read_broadcast(const Broadcast4& t, int64_t b, int64_t h, int64_t i, int64_t j) {
  return read_as_double(t.data, t.dtype,
                        b * t.stride_b + h * t.stride_h + i * t.stride_i + j * t.stride_j);
}

// One query row's logits over its sequence's keys: s[j] (−inf where masked) and the capped
// products x[j] (what the softcap derivative needs).
void row_logits(const ScoreRules& r, const Rows& q, const Rows& k, const AttentionSizes& sz,
                const Sequence& seq, int64_t b, int64_t h, int64_t i, std::vector<double>& s,
                std::vector<double>& x) {
  const int64_t hk = h / (sz.heads_q / sz.heads_kv);
  const int64_t offset = seq.len_k - seq.len_q;
  const double slope = r.alibi ? read_as_double(r.alibi, r.alibi_dtype, h) : 0.0;
  s.assign(static_cast<size_t>(seq.len_k), 0.0);
  x.assign(static_cast<size_t>(seq.len_k), 0.0);
  for (int64_t j = 0; j < seq.len_k; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < sz.dim_qk; ++d) {
      dot += q.get(seq.view_batch, seq.q_begin + i, h, d) *
             k.get(seq.view_batch, seq.k_begin + j, hk, d);
    }
    double v = static_cast<double>(r.scale) * dot;
    if (r.softcap > 0.0f) v = r.softcap * std::tanh(v / r.softcap);
    x[j] = v;
    if (r.alibi) v -= slope * static_cast<double>(std::abs(i + offset - j));
    if (r.bias.data) v += read_broadcast(r.bias, b, h, i, j);
    if (r.mask.data) {
      const double m = read_broadcast(r.mask, b, h, i, j);
      if (r.mask.dtype == DType::boolean) {
        if (m == 0.0) v = -kInf;
      } else {
        v += m;
      }
    }
    if (r.causal && j > i + offset) v = -kInf;
    if (r.window > 0 && j <= i + offset - r.window) v = -kInf;
    s[j] = v;
  }
}

// The NaN-propagating maximum.
double max_of(const std::vector<double>& s, double start) {
  double m = start;
  for (double v : s) {
    if (std::isnan(v)) return v;
    m = std::max(m, v);
  }
  return m;
}

}  // namespace

void attention_forward(const AttentionForward& p) {
  const AttentionSizes& sz = p.sizes;
  const Rows q = rows_of(p.q, p.dtype), k = rows_of(p.k, p.dtype), v = rows_of(p.v, p.dtype),
             out = rows_of(p.out, p.dtype);
  const DType stat = p.dtype == DType::f64 ? DType::f64 : DType::f32;
  const int64_t group = sz.heads_q / std::max<int64_t>(sz.heads_kv, 1);
  std::vector<double> s, x, acc(static_cast<size_t>(sz.dim_v));
  for (int64_t b = 0; b < sz.batch; ++b) {
    const Sequence seq = sequence(sz, b);
    for (int64_t h = 0; h < sz.heads_q; ++h) {
      const int64_t hk = h / group;
      const double sink =
          p.rules.sinks ? read_as_double(p.rules.sinks, p.rules.sinks_dtype, h) : -kInf;
      for (int64_t i = 0; i < seq.len_q; ++i) {
        row_logits(p.rules, q, k, sz, seq, b, h, i, s, x);
        const double m = max_of(s, sink);
        std::fill(acc.begin(), acc.end(), 0.0);
        double lse = -kInf;
        if (m == -kInf) {
          // Every key masked and no sink: zeros, lse −inf.
        } else {
          double l = std::exp(sink - m);
          for (int64_t j = 0; j < seq.len_k; ++j) l += std::exp(s[j] - m);
          for (int64_t j = 0; j < seq.len_k; ++j) {
            const double w = std::exp(s[j] - m) / l;
            if (w == 0.0) continue;
            for (int64_t d = 0; d < sz.dim_v; ++d)
              acc[d] += w * v.get(seq.view_batch, seq.k_begin + j, hk, d);
          }
          lse = m + std::log(l);
        }
        for (int64_t d = 0; d < sz.dim_v; ++d)
          out.set(seq.view_batch, seq.q_begin + i, h, d, acc[d]);
        if (p.lse) {
          write_from_double(p.lse, stat,
                            b * p.lse_layout.stride_b + h * p.lse_layout.stride_h + seq.q_begin + i,
                            lse);
        }
      }
    }
  }
}

void attention_backward(const AttentionBackward& p) {
  const AttentionSizes& sz = p.sizes;
  const Rows q = rows_of(p.q, p.dtype), k = rows_of(p.k, p.dtype), v = rows_of(p.v, p.dtype),
             out = rows_of(p.out, p.dtype), dout = rows_of(p.dout, p.dtype),
             dq = rows_of(p.dq, p.dtype), dk = rows_of(p.dk, p.dtype), dv = rows_of(p.dv, p.dtype);
  const DType stat = p.dtype == DType::f64 ? DType::f64 : DType::f32;
  const int64_t group = sz.heads_q / std::max<int64_t>(sz.heads_kv, 1);
  const ScoreRules& r = p.rules;

  // Key-side gradients of one (sequence, KV head) summed over its query heads, in float64.
  std::vector<double> dk_acc, dv_acc, dq_acc(static_cast<size_t>(sz.dim_qk));
  std::vector<double> dsinks(static_cast<size_t>(sz.heads_q), 0.0);
  std::vector<double> dbias(static_cast<size_t>(p.dbias_numel), 0.0);
  std::vector<double> s, x, o_row(static_cast<size_t>(sz.dim_v)),
      do_row(static_cast<size_t>(sz.dim_v));

  // Sequences first, so that a varlen batch's key rows are each written once; padded
  // batches with no sequences still zero their key gradients below.
  const int64_t key_batches = sz.varlen ? 1 : sz.batch;
  const int64_t key_rows = sz.varlen ? sz.total_k : sz.len_k;
  // Varlen key rows outside every sequence get zero gradients: start from zeros everywhere.
  for (int64_t bb = 0; bb < key_batches; ++bb) {
    for (int64_t j = 0; j < key_rows; ++j) {
      for (int64_t hk = 0; hk < sz.heads_kv; ++hk) {
        for (int64_t d = 0; d < sz.dim_qk; ++d) dk.set(bb, j, hk, d, 0.0);
        for (int64_t d = 0; d < sz.dim_v; ++d) dv.set(bb, j, hk, d, 0.0);
      }
    }
  }
  if (sz.varlen) {
    for (int64_t row = 0; row < sz.total_q; ++row) {
      for (int64_t h = 0; h < sz.heads_q; ++h)
        for (int64_t d = 0; d < sz.dim_qk; ++d) dq.set(0, row, h, d, 0.0);
    }
  }

  for (int64_t b = 0; b < sz.batch; ++b) {
    const Sequence seq = sequence(sz, b);
    const int64_t offset = seq.len_k - seq.len_q;
    (void)offset;
    for (int64_t hk = 0; hk < sz.heads_kv; ++hk) {
      dk_acc.assign(static_cast<size_t>(seq.len_k * sz.dim_qk), 0.0);
      dv_acc.assign(static_cast<size_t>(seq.len_k * sz.dim_v), 0.0);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const double sink = r.sinks ? read_as_double(r.sinks, r.sinks_dtype, h) : -kInf;
        for (int64_t i = 0; i < seq.len_q; ++i) {
          const int64_t qrow = seq.q_begin + i;
          const double lse = read_as_double(
              p.lse, stat, b * p.lse_layout.stride_b + h * p.lse_layout.stride_h + qrow);
          double row_dot = 0.0;
          for (int64_t d = 0; d < sz.dim_v; ++d) {
            o_row[d] = out.get(seq.view_batch, qrow, h, d);
            do_row[d] = dout.get(seq.view_batch, qrow, h, d);
            row_dot += o_row[d] * do_row[d];
          }
          std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
          if (lse != -kInf) {
            row_logits(r, q, k, sz, seq, b, h, i, s, x);
            if (r.sinks) dsinks[h] -= std::exp(sink - lse) * row_dot;
            for (int64_t j = 0; j < seq.len_k; ++j) {
              const double pj = std::exp(s[j] - lse);
              if (pj == 0.0) continue;
              double dp = 0.0;
              for (int64_t d = 0; d < sz.dim_v; ++d)
                dp += do_row[d] * v.get(seq.view_batch, seq.k_begin + j, hk, d);
              const double ds = pj * (dp - row_dot);
              if (p.dbias) {
                const Broadcast4& t = p.dbias_strides;
                dbias[b * t.stride_b + h * t.stride_h + i * t.stride_i + j * t.stride_j] += ds;
              }
              double dx = ds;
              if (r.softcap > 0.0f) {
                const double t = x[j] / r.softcap;
                dx *= 1.0 - t * t;
              }
              const double g = static_cast<double>(r.scale) * dx;
              for (int64_t d = 0; d < sz.dim_qk; ++d) {
                dq_acc[d] += g * k.get(seq.view_batch, seq.k_begin + j, hk, d);
                dk_acc[j * sz.dim_qk + d] += g * q.get(seq.view_batch, qrow, h, d);
              }
              for (int64_t d = 0; d < sz.dim_v; ++d) dv_acc[j * sz.dim_v + d] += pj * do_row[d];
            }
          }
          for (int64_t d = 0; d < sz.dim_qk; ++d) dq.set(seq.view_batch, qrow, h, d, dq_acc[d]);
        }
      }
      for (int64_t j = 0; j < seq.len_k; ++j) {
        for (int64_t d = 0; d < sz.dim_qk; ++d)
          dk.set(seq.view_batch, seq.k_begin + j, hk, d, dk_acc[j * sz.dim_qk + d]);
        for (int64_t d = 0; d < sz.dim_v; ++d)
          dv.set(seq.view_batch, seq.k_begin + j, hk, d, dv_acc[j * sz.dim_v + d]);
      }
    }
  }
  if (p.dsinks) {
    for (int64_t h = 0; h < sz.heads_q; ++h)
      write_from_double(p.dsinks, r.sinks_dtype, h, dsinks[h]);
  }
  if (p.dbias) {
    for (int64_t e = 0; e < p.dbias_numel; ++e)
      write_from_double(p.dbias, p.dbias_dtype, e, dbias[e]);
  }
}

}  // namespace rudnn::attn::reference
