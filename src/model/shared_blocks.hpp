// Cross-layer parameter sharing (ALBERT): layers that compute with another layer's block of
// weights. HParams::block_source says which block each layer takes (syslm's key
// <arch>.block_source); the file holds a shared block once, under its first layer's names.
// llama.cpp reads neither the key nor aliased tensor infos (its GGUF reader requires each
// tensor's data to follow the previous one's), so `unshare_blocks` writes the copy it loads.
#pragma once

#include <string>
#include <vector>

#include "io/gguf.hpp"

namespace syslm::model {

// ALBERT-style sharing, "U" or "U:ORDER": U blocks over n_layer layers. ORDER "cycle" (the
// default) gives layer il block il % U (Takase & Kiyono's CYCLE), "sequence" gives runs of
// consecutive layers one block (ALBERT's groups; U = 1 is ALBERT itself).
std::vector<int> shared_blocks(const std::string& spec, int n_layer);

// Writes `in` with every layer's own copy of its block and without <arch>.block_source (the
// same computation, as llama.cpp and other readers load it); atomically. Throws Error for a
// file without shared blocks.
void unshare_blocks(const io::GGUFFile& in, const std::string& out_path);

}  // namespace syslm::model
