#pragma once
/// The textual forms of the tile types, from their field tables (Note [Tile
/// formats], src/codegen/tile.cpp): what the CLI's --tile help shows.
#include <string>

namespace epifuse {

/// "elementwise tTHREADSvVECgBLOCKS, GEMM BMxBNxBKwWMxWNsSTAGESgGROUP[kSPLIT], ...".
std::string tile_forms();

}  // namespace epifuse
