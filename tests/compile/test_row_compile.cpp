// Compile tier for the row family: softmax, the attention pattern with
// dropout, RMSNorm after a residual add and LayerNorm compile with NVRTC for
// sm_90a at every tile candidate and row lengths that give rows in registers
// and streamed rows; no GPU needed.
#include <doctest/doctest.h>

#include "backend/nvrtc.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/jit.hpp"

using namespace epifuse;

TEST_SUITE("compile") {
  TEST_CASE("row kernels compile for sm_90a at every tile candidate" * doctest::test_suite("nvrtc")) {
    if (!backend::nvrtc_or_null()) {
      MESSAGE("compile tier skipped: " << backend::nvrtc_unavailable_reason());
      return;
    }
    std::vector<KernelSpec> specs(4);
    {
      Graph& g = specs[0].graph;
      g.output("y", g.softmax(g.input("x", DType::bf16)), DType::bf16);
    }
    {
      Graph& g = specs[1].graph;
      const Value z = g.add(g.scale(g.input("x", DType::f16), 0.125), g.input("mask", DType::f16));
      g.output("y", g.dropout(g.softmax(z), 0.1), DType::f16);
    }
    {
      Graph& g = specs[2].graph;
      const Value h = g.add(g.input("x", DType::bf16), g.input("residual", DType::bf16));
      g.output("h", h, DType::bf16);
      g.output("y", g.rmsnorm(h, g.input("w", DType::bf16, Broadcast::row), 1e-6), DType::bf16);
    }
    {
      Graph& g = specs[3].graph;
      g.output("y", g.layernorm(g.input("x", DType::f32), g.input("w", DType::f32, Broadcast::row),
                                g.input("b", DType::f32, Broadcast::row), 1e-5),
               DType::f32);
    }
    Jit jit("sm_90a");
    int compiled = 0;
    for (const KernelSpec& spec : specs)
      for (std::int64_t n : {7, 4096, 65536}) {
        const Shape shape{16, n, 0};
        for (const TileConfig& t : tile_candidates(spec, shape, "sm_90a")) {
          INFO("tile " << to_string(t) << " N " << n);
          auto kernel = jit.compile(spec, shape, t);
          CHECK(kernel->binary().size() > 4);
          ++compiled;
        }
      }
    MESSAGE("compiled " << compiled << " row kernels (distinct: " << jit.stats().entries << ")");
  }
}
