// y = dropout(gelu_tanh(x + bias), p = 0.1) + residual, built with the C++ Graph API
// and run by the CPU reference evaluator (the same chain as
// examples/chains/bias_gelu_dropout_add.json).
#include <cstdio>

#include "epifuse/epifuse.hpp"

int main() {
  using namespace epifuse;
  try {
    KernelSpec spec;
    spec.name = "bias_gelu_dropout_add";
    Graph& g = spec.graph;
    Value x = g.input("x", DType::f32);                       // [M,N]
    Value bias = g.input("bias", DType::f32, Broadcast::row);  // [N]
    Value residual = g.input("residual", DType::f32);         // [M,N]
    Value d = g.dropout(g.gelu_tanh(g.add(x, bias)), 0.1);
    g.output("y", g.add(d, residual), DType::f32);
    verify(spec);

    const Shape shape{4, 8};
    TensorMap inputs = make_inputs(spec, shape, /*data_seed=*/1);  // random x, bias, residual
    LaunchArgs args;
    args.seed = 42;  // dropout seed and Philox offset are launch arguments
    TensorMap out = evaluate(spec, shape, inputs, args);

    std::printf("%s", print(spec).c_str());
    const HostTensor& y = out.at("y");
    for (int i = 0; i < 8; ++i) std::printf("y[0,%d] = %+.6f\n", i, y.get(i));
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
