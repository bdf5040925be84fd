#pragma once
// Backward specs of the row family's forward chains, written by hand as grad()
// generates them (examples/backward/ has them as JSON): softmax, log_softmax,
// the attention pattern (scale, mask, softmax, dropout), layernorm and
// add+rmsnorm, with the forward chains that save the per-row statistics the
// backward reads. With `terms`, a col_sum's operand is an [M,N] f32 output
// instead (named "<name>_terms"), for the tolerance of a column sum: relative
// to the sum of its terms' magnitudes. With `magnitude`, every subtraction
// is an addition: on the inputs' magnitudes (the mask kept) the graph bounds
// the magnitude of the terms each output sums (a gradient's tolerance: it
// cancels, and f32 roundings of its terms, an FMA's or expf's, are relative
// to them).
#include "epifuse/spec.hpp"

namespace epifuse::testing {

inline void col_sum_output(Graph& g, const char* name, Value terms, DType dt, bool as_terms) {
  if (as_terms)
    g.output(std::string(name) + "_terms", terms, DType::f32);
  else
    g.output(name, g.col_sum(terms), dt);
}

// dx = y * (dy - row_sum(dy * y))
inline Value minus(Graph& g, Value a, Value b, bool magnitude) { return magnitude ? g.add(a, b) : g.sub(a, b); }

inline KernelSpec softmax_backward_spec(DType dt, bool magnitude = false) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value dy = g.input("dy", dt), y = g.input("y", dt);
  g.output("dx", g.mul(y, minus(g, dy, g.row_sum(g.mul(dy, y)), magnitude)), dt);
  return s;
}

// dx = dy - exp(y) * row_sum(dy)
inline KernelSpec log_softmax_backward_spec(DType dt, bool magnitude = false) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value dy = g.input("dy", dt), y = g.input("y", dt);
  g.output("dx", minus(g, dy, g.mul(g.exp(y), g.row_sum(dy)), magnitude), dt);
  return s;
}

// y = dropout(softmax(x * scale + mask), p, stream 0), saving the row max and sum ([M], f32).
inline KernelSpec attention_forward_stats_spec(DType dt, double scale, double p) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value z = g.add(g.scale(g.input("x", dt), scale), g.input("mask", dt));
  const Value m = g.row_max(z);
  const Value e = g.exp(g.sub(z, m));
  const Value sum = g.row_sum(e);
  g.output("y", g.dropout(g.div(e, sum), p, RngMode::philox4, 0), dt);
  g.output("rmax", m, DType::f32);
  g.output("rsum", sum, DType::f32);
  return s;
}

// The attention pattern's backward from x, mask and the saved statistics:
// p_ = exp(x * scale + mask - rmax) / rsum; dz = dropout(dy, p, stream 0);
// dx = scale * p_ * (dz - row_sum(dz * p_)). With `dz_out`, dz is an output too.
inline KernelSpec attention_backward_spec(DType dt, double scale, double p, bool dz_out = false, bool magnitude = false) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value dy = g.input("dy", dt), x = g.input("x", dt), mask = g.input("mask", dt);
  const Value rmax = g.input("rmax", DType::f32, Broadcast::col), rsum = g.input("rsum", DType::f32, Broadcast::col);
  const Value pr = g.div(g.exp(minus(g, g.add(g.scale(x, scale), mask), rmax, magnitude)), rsum);
  const Value dz = g.dropout(dy, p, RngMode::philox4, 0);
  g.output("dx", g.scale(g.mul(pr, minus(g, dz, g.row_sum(g.mul(dz, pr)), magnitude)), scale), dt);
  if (dz_out) g.output("dz", dz, dt);
  return s;
}

// layernorm(x, w, b) saving mean and rstd ([M], f32).
inline KernelSpec layernorm_forward_stats_spec(DType dt, double eps) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value x = g.input("x", dt);
  const Value mean = g.row_mean(x);
  const Value xc = g.sub(x, mean);
  const Value rstd = g.rsqrt(g.add_scalar(g.row_mean(g.mul(xc, xc)), eps));
  g.output("y", g.add(g.mul(g.mul(xc, rstd), g.input("weight", dt, Broadcast::row)), g.input("bias", dt, Broadcast::row)),
           dt);
  g.output("mean", mean, DType::f32);
  g.output("rstd", rstd, DType::f32);
  return s;
}

// xhat = (x - mean) * rstd; g = dy * w; dx = rstd * (g - row_mean(g) - xhat * row_mean(g * xhat));
// dw = col_sum(dy * xhat); db = col_sum(dy).
inline KernelSpec layernorm_backward_spec(DType dt, bool terms = false, bool magnitude = false) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value dy = g.input("dy", dt), x = g.input("x", dt), w = g.input("weight", dt, Broadcast::row);
  const Value mean = g.input("mean", DType::f32, Broadcast::col), rstd = g.input("rstd", DType::f32, Broadcast::col);
  const Value xhat = g.mul(minus(g, x, mean, magnitude), rstd);
  const Value gr = g.mul(dy, w);
  const Value t =
      minus(g, minus(g, gr, g.row_mean(gr), magnitude), g.mul(xhat, g.row_mean(g.mul(gr, xhat))), magnitude);
  g.output("dx", g.mul(rstd, t), dt);
  col_sum_output(g, "dw", g.mul(dy, xhat), DType::f32, terms);
  col_sum_output(g, "db", dy, DType::f32, terms);
  return s;
}

// add+rmsnorm (h = x + res; y = rmsnorm(h, w)) backward from the saved h and rstd:
// hhat = h * rstd; g = dy * w; dh = rstd * (g - hhat * row_mean(g * hhat));
// dx = dres = dh; dw = col_sum(dy * hhat) in `wdt`.
inline KernelSpec add_rmsnorm_backward_spec(DType dt, DType wdt, bool terms = false, bool magnitude = false) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value dy = g.input("dy", dt), h = g.input("h", dt), w = g.input("weight", dt, Broadcast::row);
  const Value rstd = g.input("rstd", DType::f32, Broadcast::col);
  const Value hhat = g.mul(h, rstd);
  const Value gr = g.mul(dy, w);
  const Value dh = g.mul(rstd, minus(g, gr, g.mul(hhat, g.row_mean(g.mul(gr, hhat))), magnitude));
  g.output("dx", dh, dt);
  g.output("dres", dh, dt);
  col_sum_output(g, "dw", g.mul(dy, hhat), wdt, terms);
  return s;
}

}  // namespace epifuse::testing
