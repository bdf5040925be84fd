// emit_probe CHAIN.json TARGET M,N[,K]: what codegen decides for one chain,
// target and shape, without a GPU: the resolved tile, the launch geometry at a
// few multiprocessor counts (none known, an H100's 132, an A100's 108, an
// MI250X GCD's 110), the workspace, and the tuner's candidate tiles. Built and
// run by tools/emit_all.sh to compare codegen before and after a refactor.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "codegen/family.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"
#include "runtime/cache_records.hpp"

using namespace epifuse;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: emit_probe CHAIN.json TARGET M,N[,K]\n");
    return 2;
  }
  try {
    const KernelSpec spec = load_spec(argv[1]);
    const std::string target = argv[2];
    Shape shape;
    long long m = 0, n = 0, k = 0;
    const int got = std::sscanf(argv[3], "%lld,%lld,%lld", &m, &n, &k);
    if (got < 2) return 2;
    shape.m = m;
    shape.n = n;
    shape.k = spec.mainloop.kind == MainloopKind::elementwise ? 0 : k;
    const KernelSource ks = emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, target);
    const KernelFamily& family = family_for(spec);
    fmt::print("tile {}\nname {}\nshared_bytes {}\n", to_string(ks.tile), ks.name, ks.shared_bytes);
    for (int mp : {0, 132, 108, 110}) {
      const LaunchGeometry g = family.geometry(ks, shape, mp);
      fmt::print("geometry sms={} grid={},{},{} block={},{},{} smem={} persistent={} multiple={}\n", mp, g.grid[0],
                 g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2], g.shared_bytes, g.persistent_work,
                 g.grid_multiple);
    }
    const WorkspaceNeeds w = family.workspace(ks, shape);
    fmt::print("workspace zeroed={} scratch={}\n", w.zeroed, w.scratch);
    std::string bytes;
    for (unsigned char c : tile_bytes(ks.tile)) bytes += fmt::format("{:02x}", c);
    fmt::print("tile_bytes {}\n", bytes);
    // The general (any-alignment) kernel of the same key: its text's hash and geometry.
    try {
      const KernelSource gk = emit_kernel(spec, shape, ks.tile, KernelPath::general, target);
      const LaunchGeometry g = family.geometry(gk, shape, 132);
      fmt::print("general tile={} text={:016x} grid={},{} block={} smem={}\n", to_string(gk.tile),
                 source_hash(gk.text), g.grid[0], g.grid[1], g.block[0], g.shared_bytes);
    } catch (const std::exception& e) {
      fmt::print("general error: {}\n", e.what());
    }
    for (const TileConfig& t : tile_candidates(spec, shape, target)) {
      fmt::print("candidate {}", to_string(t));
      // Each candidate's geometry and workspace too, where it emits.
      try {
        const KernelSource c = emit_kernel(spec, shape, t, KernelPath::fastest, target);
        const LaunchGeometry g = family.geometry(c, shape, 132);
        const WorkspaceNeeds cw = family.workspace(c, shape);
        fmt::print(" grid={},{} block={} smem={} ws={},{} hash={:016x} text={:016x}", g.grid[0], g.grid[1],
                   g.block[0], g.shared_bytes, cw.zeroed, cw.scratch, tile_hash(t), source_hash(c.text));
      } catch (const std::exception& e) {
        fmt::print(" error: {}", e.what());
      }
      fmt::print("\n");
    }
  } catch (const std::exception& e) {
    fmt::print("error: {}\n", e.what());
    return 1;
  }
  return 0;
}
