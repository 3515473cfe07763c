// The rank layout (parallel/mesh.hpp): coordinates and ranks are inverse on awkward meshes, each
// group kind is the ranks sharing the other coordinates, the spans the planner charges for
// crossing nodes are the groups' extents, and, under mpirun, split_mesh's groups hold exactly
// those ranks in rank order.
#include "parallel/mesh.hpp"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/error.hpp"
#include "world.hpp"

namespace syslm::parallel {
namespace {

TEST(Mesh, CoordinatesAndRanksAreInverseAndGroupsSpanTheirExtent) {
    for (const Mesh m : {Mesh{3, 2, 2}, Mesh{1, 4, 1}, Mesh{5, 1, 3}, Mesh{2, 3, 1}}) {
        std::set<int> seen;
        int tp_extent = 0, dp_extent = 0, pp_extent = 0;
        for (int r = 0; r < m.size(); ++r) {
            const Mesh::Coord c = m.coord(r);
            ASSERT_TRUE(c.dp >= 0 && c.dp < m.dp && c.tp >= 0 && c.tp < m.tp && c.pp >= 0 &&
                        c.pp < m.pp);
            EXPECT_EQ(m.rank(c), r);
            seen.insert(m.rank(c));
            // The extent (last - first + 1) of the ranks in r's group of each kind.
            auto extent = [&](auto vary, int n) {
                int lo = 1 << 30, hi = -1;
                for (int i = 0; i < n; ++i) {
                    Mesh::Coord o = c;
                    vary(o, i);
                    lo = std::min(lo, m.rank(o));
                    hi = std::max(hi, m.rank(o));
                }
                return hi - lo + 1;
            };
            tp_extent = std::max(tp_extent, extent([](Mesh::Coord& o, int i) { o.tp = i; }, m.tp));
            dp_extent = std::max(dp_extent, extent([](Mesh::Coord& o, int i) { o.dp = i; }, m.dp));
            pp_extent = std::max(pp_extent, extent([](Mesh::Coord& o, int i) { o.pp = i; }, m.pp));
        }
        EXPECT_EQ(static_cast<int>(seen.size()), m.size());
        EXPECT_EQ(tp_extent, m.tp_span()) << "tensor parallel: consecutive ranks";
        EXPECT_LE(dp_extent, m.dp_span());
        EXPECT_LE(pp_extent, m.pp_span());
    }
    EXPECT_EQ(Mesh::of_world(12, 2, 3).dp, 2);
    EXPECT_THROW(Mesh::of_world(10, 4, 1), Error);
    EXPECT_THROW(Mesh::of_world(6, 0, 1), Error);
}

// Every layout of the world's ranks: each group holds the ranks that share its other
// coordinates, in rank order.
TEST(Mesh, SplitGroupsHoldTheRanksSharingTheOtherCoordinates) {
    Communicator& world = world_comm();
    const int n = world.size();
    for (int tp = 1; tp <= n; ++tp)
        for (int pp = 1; pp * tp <= n; ++pp) {
            if (n % (tp * pp)) continue;
            const Mesh m = Mesh::of_world(n, tp, pp);
            const MeshGroups g = split_mesh(world, m);
            const Mesh::Coord c = m.coord(world.rank());
            if (g.tp) {
                EXPECT_EQ(g.tp->size(), m.tp);
                EXPECT_EQ(g.tp->rank(), c.tp);
            }
            if (g.dp) {
                EXPECT_EQ(g.dp->size(), m.dp);
                EXPECT_EQ(g.dp->rank(), c.dp);
            }
            if (g.pp) {
                EXPECT_EQ(g.pp->size(), m.pp);
                EXPECT_EQ(g.pp->rank(), c.pp);
            }
            EXPECT_EQ(g.tp != nullptr, m.tp > 1);
            EXPECT_EQ(g.pp != nullptr, m.pp > 1);
            EXPECT_EQ(g.dp != nullptr, m.tp > 1 || m.pp > 1);
        }
}

}  // namespace
}  // namespace syslm::parallel
