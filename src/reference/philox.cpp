#include "reference/philox.hpp"

#include "common/philox.cuh"
#include "epifuse/errors.hpp"

namespace epifuse {

std::uint32_t philox4_draw(std::uint64_t seed, std::uint64_t offset, std::uint32_t stream,
                           std::uint64_t i) {
  return ef_philox4_draw(seed, offset, stream, i);
}

std::uint32_t triton_draw(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  return ef_triton_draw(seed, offset, i);
}

bool dropout_keep(RngMode mode, double p, std::uint64_t seed, std::uint64_t offset,
                  std::uint32_t stream, std::uint64_t i) {
  if (mode == RngMode::triton)
    return ef_triton_keep(ef_triton_draw(seed, offset, i), triton_probability(p));
  return ef_dropout_keep(ef_philox4_draw(seed, offset, stream, i), dropout_threshold(p));
}

}  // namespace epifuse
