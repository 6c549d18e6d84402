#pragma once
// Float64 CPU reference of the gated delta rule, forward and backward: the definition every
// GPU path of this family is tested against. Plain contiguous double arrays so that it
// depends on nothing else; the tensor-facing wrappers convert into these layouts.
#include <cstdint>
#include <vector>

namespace rudnn::gdn::reference {

struct Dims {
  std::int64_t batch = 0;        // B (with cu_seqlens: the number of sequences N)
  std::int64_t steps = 0;        // T (with cu_seqlens: the packed length, all sequences)
  std::int64_t key_heads = 0;    // Hk (spec 000 form: Hk == Hv == H)
  std::int64_t value_heads = 0;  // Hv, a multiple of Hk; value head h reads key head h / (Hv / Hk)
  std::int64_t key_dim = 0;      // Dk
  std::int64_t value_dim = 0;    // Dv
};

// Variable-length packed sequences: empty means dense [B, T, ...] inputs. Otherwise the
// inputs have batch 1 and sequence n is steps [cu_seqlens[n], cu_seqlens[n + 1]) of it, with
// its own state n (N + 1 offsets, 0 first, T last, non-decreasing: the caller checked).
using SeqLens = std::vector<std::int64_t>;

// Spec 003 form ([B,T,H,D] layout, multiplicative gate). For every step t and value head,
// with S the [Dv, Dk] state: S <- g_t S; S <- S + beta_t (v_t - S k_t) k_t^T; y_t = S q_t.
// q, k: [B,T,Hk,Dk]; v: [B,T,Hv,Dv]; gate, beta: [B,T,Hv]; state: [B,Hv,Dv,Dk], updated in
// place to the final state; y: [B,T,Hv,Dv] (resized). When every_step is non-null it receives
// each step's state, [B,T,Hv,Dv,Dk].
void gated_delta_bthd(const Dims& dims, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const std::vector<double>& gate,
                      const std::vector<double>& beta, std::vector<double>& state,
                      std::vector<double>& y, std::vector<double>* every_step = nullptr,
                      const SeqLens& cu_seqlens = {});

// Spec 000 form (GatedDeltaInput, [B,H,T,D] layout, one head count H). The state is stored
// transposed, [B,H,K,V] (state[k][v] = S[v][k]); the decay is exp(log_decay_t) and the
// read-out uses query_scale * q_t. q, k: [B,H,T,K]; v: [B,H,T,V]; beta, log_decay: [B,H,T];
// state: [B,H,K,V] updated in place; y: [B,H,T,V] (resized).
void gated_delta_bhtd(const Dims& dims, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const std::vector<double>& beta,
                      const std::vector<double>& log_decay, double query_scale,
                      std::vector<double>& state, std::vector<double>& y,
                      const SeqLens& cu_seqlens = {});

// The chunked (WY / UT-transform) algorithm of gated_delta_bhtd, in float64, chunks of
// `chunk_size` steps (the last of each sequence shorter): the CPU backend of
// chunk_gated_delta_rule, equal to gated_delta_bhtd up to rounding. Same operands and layouts.
void gated_delta_bhtd_chunked(const Dims& dims, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& beta,
                              const std::vector<double>& log_decay, double query_scale,
                              std::int64_t chunk_size, std::vector<double>& state,
                              std::vector<double>& y, const SeqLens& cu_seqlens = {});

// The same chunked algorithm over spec 003's operands and layouts (those of
// gated_delta_bthd: decay = gate itself, scale 1, value head h reads key head h / (Hv / Hk),
// state [B,Hv,Dv,Dk] updated in place): the CPU backend of chunk_gated_delta, equal to
// gated_delta_bthd up to rounding. A gate of 0 is exact (decays are multiplied, not logged).
void gated_delta_bthd_chunked(const Dims& dims, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& gate, const std::vector<double>& beta,
                              std::int64_t chunk_size, std::vector<double>& state,
                              std::vector<double>& y, const SeqLens& cu_seqlens = {});

// Gradients of a loss L(y, final state) with respect to every input, in the inputs' layouts.
// dgate is dL/dg (spec 003) or dL/dlog_decay (spec 000); dstate is dL/d(initial state).
struct Grads {
  std::vector<double> dq, dk, dv, dgate, dbeta, dstate;
};

// The backward of gated_delta_bthd: dy [B,T,Hv,Dv]; dfinal [B,Hv,Dv,Dk] (empty: zero).
// Every step's state is recomputed forward and kept (this is the definition, not a fast
// path), then the steps are walked backwards.
Grads gated_delta_bthd_backward(const Dims& dims, const std::vector<double>& q,
                                const std::vector<double>& k, const std::vector<double>& v,
                                const std::vector<double>& gate, const std::vector<double>& beta,
                                const std::vector<double>& state, const std::vector<double>& dy,
                                const std::vector<double>& dfinal, const SeqLens& cu_seqlens = {});

// The backward of gated_delta_bhtd: dy [B,H,T,V]; dfinal [B,H,K,V] (empty: zero).
Grads gated_delta_bhtd_backward(const Dims& dims, const std::vector<double>& q,
                                const std::vector<double>& k, const std::vector<double>& v,
                                const std::vector<double>& beta,
                                const std::vector<double>& log_decay, double query_scale,
                                const std::vector<double>& state, const std::vector<double>& dy,
                                const std::vector<double>& dfinal, const SeqLens& cu_seqlens = {});

}  // namespace rudnn::gdn::reference
