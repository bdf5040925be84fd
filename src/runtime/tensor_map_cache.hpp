#pragma once
// The Jit's cache of encoded TMA descriptors (CUDA only: a wgmma launch's tensor maps).
#include <array>
#include <cstddef>
#include <cstring>
#include <mutex>

#include "backend/cuda_driver.hpp"
#include "codegen/family.hpp"

namespace epifuse {

// Tensor maps (TMA descriptors) are encoded once per description and reused:
// a wgmma launch fills two, and encoding is a driver call on the host. A few
// dozen recent ones are kept, replaced round-robin.
class TensorMapCache {
 public:
  void fill(backend::CudaDriver& driver, const TensorMap2d& want, unsigned char* out) {
    std::lock_guard lock(mutex_);
    for (const Entry& e : entries_)
      if (e.used && e.key == want) {
        std::memcpy(out, e.map, sizeof e.map);
        return;
      }
    Entry& e = entries_[next_++ % entries_.size()];
    driver.encode_tensor_map_2d(e.map, want.element_bytes, want.base, want.inner, want.outer, want.row_bytes,
                                want.box_inner, want.box_outer, want.tf32, want.batches, want.batch_bytes);
    e.key = want;
    e.used = true;
    std::memcpy(out, e.map, sizeof e.map);
  }

 private:
  struct Entry {
    TensorMap2d key;
    bool used = false;
    alignas(64) unsigned char map[128] = {};
  };
  std::mutex mutex_;
  std::array<Entry, 32> entries_{};
  std::size_t next_ = 0;
};

}  // namespace epifuse
