// The triton RNG mode against what real Triton computed (docs/design.md §4): draws,
// uniforms, tutorial dropout masks and the boundary draws where a 2^-31 scale
// would decide differently. The data was made on a GPU by tools/triton_golden.py
// (Triton 3.6.0, H100) and is compared here bit for bit, on the CPU.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/philox.cuh"
#include "epifuse/reference.hpp"
#include "reference/philox.hpp"

using namespace epifuse;

namespace {

const nlohmann::json& golden() {
  static const nlohmann::json doc = [] {
    std::ifstream in(std::string(EPIFUSE_SOURCE_DIR) + "/tests/golden/triton_dropout.json");
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
  }();
  return doc;
}

std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("triton mode: tl.randint and tl.rand of real Triton") {
  int checked = 0;
  for (const auto& block : golden().at("rand")) {
    const auto seed = block.at("seed").get<std::uint64_t>();
    const auto offset = block.at("offset").get<std::uint64_t>();
    const auto& words = block.at("words");
    const auto& rand = block.at("rand_bits");
    CAPTURE(seed);
    CAPTURE(offset);
    for (std::size_t i = 0; i < words.size(); ++i) {
      const std::uint32_t draw = triton_draw(seed, offset, i);
      CHECK(draw == words[i].get<std::uint32_t>());
      CHECK(f32_bits(ef_triton_uniform(draw)) == rand[i].get<std::uint32_t>());
      ++checked;
    }
  }
  CHECK(checked >= 2000);
}

TEST_CASE("triton mode: uint_to_uniform_float at the edges") {
  const auto& cases = golden().at("uniform");
  REQUIRE(cases.size() >= 20);
  for (const auto& c : cases) {
    const auto x = c.at("x").get<std::uint32_t>();
    CAPTURE(x);
    CHECK(f32_bits(ef_triton_uniform(x)) == c.at("r_bits").get<std::uint32_t>());
  }
}

TEST_CASE("triton mode: the dropout tutorial's masks, through the reference evaluator") {
  for (const auto& m : golden().at("masks")) {
    const auto seed = m.at("seed").get<std::uint64_t>();
    const auto offset = m.at("offset").get<std::uint64_t>();
    const double p = m.at("p").get<double>();
    const auto n = m.at("n").get<std::int64_t>();
    const std::string hex = m.at("keep_hex").get<std::string>();
    CAPTURE(seed);
    CAPTURE(offset);
    CAPTURE(p);
    KernelSpec spec;
    const Value x = spec.graph.input("x", DType::f32);
    spec.graph.output("y", spec.graph.dropout(x, p, RngMode::triton), DType::f32);
    HostTensor ones = HostTensor::zeros(DType::f32, {n / 64, 64});
    for (std::int64_t i = 0; i < n; ++i) ones.set(i, 1.0f);
    const HostTensor y = evaluate(spec, {n / 64, 64, 0}, {{"x", ones}}, {seed, offset}).at("y");
    std::int64_t mismatches = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const int byte = std::stoi(hex.substr(static_cast<std::size_t>(i >> 3) * 2, 2), nullptr, 16);
      const bool want = (byte >> (i & 7)) & 1;
      mismatches += (y.get(i) != 0.0f) != want;
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("triton mode: boundary draws, where a 2^-31 scale keeps and Triton drops") {
  const auto& cases = golden().at("boundary");
  REQUIRE(cases.size() >= 100);  // the generator searched 2^32 draws; ~400 are expected
  for (const auto& c : cases) {
    const auto seed = c.at("seed").get<std::uint64_t>();
    const auto offset = c.at("offset").get<std::uint64_t>();
    const double p = c.at("p").get<double>();
    CAPTURE(seed);
    CAPTURE(offset);
    CAPTURE(p);
    const std::uint32_t draw = triton_draw(seed, offset, 0);
    CHECK(draw == c.at("word").get<std::uint32_t>());
    CHECK(f32_bits(ef_triton_uniform(draw)) == c.at("rand_bits").get<std::uint32_t>());
    CHECK(dropout_keep(RngMode::triton, p, seed, offset, 0, 0) == c.at("keep").get<bool>());
  }
}
