#include "parallel/mesh.hpp"

#include "core/error.hpp"

namespace syslm::parallel {

Mesh Mesh::of_world(int ranks, int tp, int pp) {
    SYSLM_CHECK(tp >= 1 && pp >= 1 && ranks % (tp * pp) == 0, "--tp ", tp, " x --pp ", pp,
                " does not divide the ", ranks, " ranks started");
    return {ranks / (tp * pp), tp, pp};
}

MeshGroups split_mesh(Communicator& world, const Mesh& mesh) {
    SYSLM_CHECK(world.size() == mesh.size(), "a mesh of ", mesh.dp, " x ", mesh.tp, " x ",
                mesh.pp, " ranks for a world of ", world.size());
    const int r = world.rank();
    const Mesh::Coord c = mesh.coord(r);
    MeshGroups g;
    // Colors: the coordinates the group's members share.
    if (mesh.tp > 1) g.tp = world.split(c.pp * mesh.dp + c.dp, r);
    if (mesh.tp > 1 || mesh.pp > 1) g.dp = world.split(c.pp * mesh.tp + c.tp, r);
    if (mesh.pp > 1) g.pp = world.split(c.dp * mesh.tp + c.tp, r);
    return g;
}

}  // namespace syslm::parallel
