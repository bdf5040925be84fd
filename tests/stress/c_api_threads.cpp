// One ef_spec, 16 threads at once, through the C ABI alone (c_api.h, Note [One
// spec, many threads] in src/capi/c_api.cpp): builders add ops and outputs,
// readers serialise, clone and read the bindings, evaluators run the CPU
// reference. tools/sanitize_c_api.sh runs it under ASan+UBSan and under TSan.
//
// What is checked, besides the sanitizers' silence: every call returns EF_OK
// or, where a limit may be reached, EF_USER_ERROR; serialised text reads back;
// the output present from the start evaluates, on the shared spec and on
// clones, to exactly what a single-threaded evaluation gave before the threads
// started; each output a builder adds evaluates to exactly what it computes.
//
// Usage: epifuse_c_api_threads [ROUNDS] (default 40). Exit 0 when all is well.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "epifuse/c_api.h"

namespace {

constexpr int k_threads = 16;
constexpr std::int64_t k_m = 16;
constexpr std::int64_t k_n = 64;
// Outputs one builder adds: 4 builders keep the spec under the 32-output limit.
constexpr int k_outputs_per_builder = 6;

std::atomic<int> failures{0};

void fail(const std::string& what) {
  std::fprintf(stderr, "c_api_threads: FAILED: %s\n", what.c_str());
  failures.fetch_add(1);
}

// A status that must be EF_OK; false (and a failure) otherwise.
bool ok(int status, const char* call) {
  if (status == EF_OK) return true;
  fail(std::string(call) + " returned " + std::to_string(status) + ": " + ef_last_error());
  return false;
}

struct Data {
  std::vector<float> x = std::vector<float>(k_m * k_n);
  std::vector<float> bias = std::vector<float>(k_n);
};

// Non-zero values, so a dropped or misplaced element shows.
Data random_inputs(unsigned seed) {
  Data d;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mag(0.25f, 2.0f);
  for (float& v : d.x) v = (gen() & 1 ? 1.0f : -1.0f) * mag(gen);
  for (float& v : d.bias) v = (gen() & 1 ? 1.0f : -1.0f) * mag(gen);
  return d;
}

// Output `name` of `spec` on `d`; EF_OK or the status.
int evaluate(const ef_spec* spec, const Data& d, const char* name, std::vector<float>& out, std::uint64_t seed) {
  out.assign(k_m * k_n, 0.0f);
  const char* in_names[] = {"x", "bias"};
  const void* ins[] = {d.x.data(), d.bias.data()};
  const char* out_names[] = {name};
  void* outs[] = {out.data()};
  return ef_evaluate(spec, k_m, k_n, 0, in_names, ins, 2, out_names, outs, 1, seed, 3);
}

struct Shared {
  ef_spec* spec = nullptr;
  std::uint32_t x = 0;
  Data data;
  std::vector<float> y0;  // output "y0", evaluated before the threads start
  std::uint64_t seed = 0;
};

// Adds relu/add/scale ops on x and its own results, and some outputs; checks
// each output it adds against its own arithmetic (scale by 0.5: exact).
void builder(Shared& s, int id, int rounds) {
  // 3 ops a round, one of them a scale: 4 builders stay under the 256 scale ops.
  rounds = std::min(rounds, 60);
  int outputs = 0;
  for (int r = 0; r < rounds; ++r) {
    std::uint32_t relu = 0, sum = 0, half = 0;
    if (!ok(ef_spec_op(s.spec, "relu", &s.x, 1, nullptr, &relu), "ef_spec_op(relu)")) return;
    const std::uint32_t add_args[] = {relu, s.x};
    if (!ok(ef_spec_op(s.spec, "add", add_args, 2, nullptr, &sum), "ef_spec_op(add)")) return;
    if (!ok(ef_spec_op(s.spec, "scale", &sum, 1, "{\"alpha\": 0.5}", &half), "ef_spec_op(scale)")) return;
    if (outputs == k_outputs_per_builder || r % 3 != 0) continue;
    const std::string name = "t" + std::to_string(id) + "_" + std::to_string(r);
    const int status = ef_spec_output(s.spec, name.c_str(), half, "f32");
    if (status == EF_USER_ERROR) {  // another builder that finished filled the spec up to the limit
      outputs = k_outputs_per_builder;
      continue;
    }
    if (!ok(status, "ef_spec_output")) return;
    ++outputs;
    std::vector<float> got;
    if (!ok(evaluate(s.spec, s.data, name.c_str(), got, 0), "ef_evaluate(builder's output)")) return;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const float x = s.data.x[i];
      const float want = ((x > 0 ? x : 0.0f) + x) * 0.5f;
      if (got[i] != want) {
        fail(name + "[" + std::to_string(i) + "] = " + std::to_string(got[i]) + ", expected " + std::to_string(want));
        return;
      }
    }
  }
  // Past the output limit a builder call is a user error, never a crash.
  std::uint32_t extra = 0;
  if (!ok(ef_spec_op(s.spec, "relu", &s.x, 1, nullptr, &extra), "ef_spec_op(relu)")) return;
  int status = EF_OK;
  for (int i = 0; i < 40 && status == EF_OK; ++i)
    status = ef_spec_output(s.spec, ("over" + std::to_string(id) + "_" + std::to_string(i)).c_str(), extra, "f32");
  if (status != EF_USER_ERROR) fail("the 33rd output was not a user error: " + std::to_string(status));
}

// Serialises the spec and reads the text back; clones it and serialises the clone.
void reader(Shared& s, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    char* text = nullptr;
    if (!ok(ef_spec_to_json(s.spec, &text), "ef_spec_to_json")) return;
    ef_spec* back = nullptr;
    const bool read = ok(ef_spec_from_json_bytes(text, std::strlen(text), "to_json", &back), "ef_spec_from_json_bytes");
    ef_string_free(text);
    if (!read) return;
    ef_spec_free(back);
    ef_spec* clone = nullptr;
    if (!ok(ef_spec_clone(s.spec, &clone), "ef_spec_clone")) return;
    char* again = nullptr;
    const bool wrote = ok(ef_spec_to_json(clone, &again), "ef_spec_to_json(clone)");
    ef_string_free(again);
    ef_spec_free(clone);
    if (!wrote) return;
  }
}

void binder(Shared& s, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    char* b = nullptr;
    if (!ok(ef_spec_bindings(s.spec, k_m, k_n, 0, &b), "ef_spec_bindings")) return;
    const bool has_y0 = std::strstr(b, "\"y0\"") != nullptr;
    ef_string_free(b);
    if (!has_y0) return fail("bindings without output y0");
    if (ef_spec_verify(s.spec) != EF_OK) return fail(std::string("ef_spec_verify: ") + ef_last_error());
  }
}

// y0 on the shared spec and on a clone, each exactly the single-threaded result.
void evaluator(Shared& s, int rounds) {
  std::vector<float> got;
  for (int r = 0; r < rounds; ++r) {
    if (!ok(evaluate(s.spec, s.data, "y0", got, s.seed), "ef_evaluate(y0)")) return;
    if (got != s.y0) return fail("y0 on the shared spec differs from the single-threaded evaluation");
    ef_spec* clone = nullptr;
    if (!ok(ef_spec_clone(s.spec, &clone), "ef_spec_clone")) return;
    const int status = evaluate(clone, s.data, "y0", got, s.seed);
    ef_spec_free(clone);
    if (!ok(status, "ef_evaluate(y0 of a clone)")) return;
    if (got != s.y0) return fail("y0 on a clone differs from the single-threaded evaluation");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 40;
  if (rounds <= 0) {
    std::fprintf(stderr, "usage: epifuse_c_api_threads [ROUNDS] (a positive integer)\n");
    return 2;
  }
  Shared s;
  s.data = random_inputs(12345);
  s.seed = 0x9E3779B97F4A7C15ull;
  // y0 = dropout(gelu_tanh(x + bias), 0.1) + x: broadcast, a transcendental and
  // the seed-dependent mask, so a torn read of the spec would show in the numbers.
  std::uint32_t bias = 0, sum = 0, gelu = 0, drop = 0, y0 = 0;
  if (!ok(ef_spec_new("stress", nullptr, &s.spec), "ef_spec_new") ||
      !ok(ef_spec_input(s.spec, "x", "f32", nullptr, &s.x), "ef_spec_input(x)") ||
      !ok(ef_spec_input(s.spec, "bias", "f32", "row", &bias), "ef_spec_input(bias)"))
    return 1;
  const std::uint32_t add_args[] = {s.x, bias};
  if (!ok(ef_spec_op(s.spec, "add", add_args, 2, nullptr, &sum), "ef_spec_op(add)") ||
      !ok(ef_spec_op(s.spec, "gelu_tanh", &sum, 1, nullptr, &gelu), "ef_spec_op(gelu_tanh)") ||
      !ok(ef_spec_op(s.spec, "dropout", &gelu, 1, "{\"p\": 0.1}", &drop), "ef_spec_op(dropout)"))
    return 1;
  const std::uint32_t out_args[] = {drop, s.x};
  if (!ok(ef_spec_op(s.spec, "add", out_args, 2, nullptr, &y0), "ef_spec_op(add)") ||
      !ok(ef_spec_output(s.spec, "y0", y0, "f32"), "ef_spec_output(y0)") ||
      !ok(evaluate(s.spec, s.data, "y0", s.y0, s.seed), "ef_evaluate(y0, one thread)"))
    return 1;

  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&s, t, rounds] {
      switch (t % 4) {
        case 0: builder(s, t, rounds); break;
        case 1: reader(s, rounds); break;
        case 2: binder(s, rounds); break;
        default: evaluator(s, rounds); break;
      }
    });
  }
  for (auto& th : threads) th.join();

  // The end state: every builder stopped at the output limit.
  char* b = nullptr;
  if (ok(ef_spec_bindings(s.spec, k_m, k_n, 0, &b), "ef_spec_bindings")) {
    int outputs = 0;
    for (const char* p = b; (p = std::strstr(p, "\"shape\"")) != nullptr; ++p) ++outputs;
    ef_string_free(b);
    if (outputs != 2 + 32) fail("expected 2 inputs and 32 outputs at the end, got " + std::to_string(outputs) + " bindings");
  }
  ef_spec_free(s.spec);
  if (failures.load() != 0) return 1;
  std::printf("c_api_threads: %d threads x %d rounds: ok\n", k_threads, rounds);
  return 0;
}
