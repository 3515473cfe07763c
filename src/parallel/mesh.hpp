// The rank layout of dp x tp x pp parallelism, for the trainer (which ranks form which groups)
// and the planner (which groups cross nodes) alike. Tensor parallel is innermost, pipeline
// stages outermost: rank = (pp_index x dp + dp_index) x tp + tp_index, so a tensor-parallel
// group is tp consecutive ranks (one node, where it fits), a data-parallel group spans tp x dp
// and the pipeline the whole mesh (docs/design/distributed.md).
#pragma once

#include <memory>

#include "parallel/communicator.hpp"

namespace syslm::parallel {

struct Mesh {
    int dp = 1, tp = 1, pp = 1;

    struct Coord {
        int dp = 0, tp = 0, pp = 0;
    };
    int size() const { return dp * tp * pp; }
    Coord coord(int rank) const { return {rank / tp % dp, rank % tp, rank / (tp * dp)}; }
    int rank(Coord c) const { return (c.pp * dp + c.dp) * tp + c.tp; }
    // Consecutive ranks a group of each kind spans: a group spanning more ranks than a node has
    // devices crosses nodes.
    int tp_span() const { return tp; }
    int dp_span() const { return tp * dp; }
    int pp_span() const { return tp * dp * pp; }

    // The mesh of `ranks` processes with tp and pp given (dp the rest); an error naming the
    // numbers where tp x pp does not divide them.
    static Mesh of_world(int ranks, int tp, int pp);
};

// This rank's groups, split from `world` (every rank calls it): the ranks of its replica's stage
// (tensor parallel), the replicas of its shard (data parallel) and the stages of its replica
// (pipeline). Null where the mesh has one rank of that kind, except that the data-parallel group
// exists whenever the world holds more than the replicas (tp or pp above 1).
struct MeshGroups {
    std::unique_ptr<Communicator> tp, dp, pp;
};
MeshGroups split_mesh(Communicator& world, const Mesh& mesh);

}  // namespace syslm::parallel
