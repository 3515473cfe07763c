#include "tune/allocate.hpp"

#include <algorithm>
#include <queue>

#include "core/error.hpp"

namespace syslm::tune {
namespace {

// The options of one tensor on the lower convex hull of (cost, kl), from the costliest to the
// cheapest: dominated options and those above the hull are dropped.
std::vector<size_t> hull(const std::vector<TypeCost>& options) {
    std::vector<size_t> order(options.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto cost = [&](size_t i) { return options[i].goal_cost(); };
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return cost(a) != cost(b) ? cost(a) > cost(b) : options[a].kl < options[b].kl;
    });
    std::vector<size_t> h;
    for (size_t i : order) {
        const TypeCost& o = options[i];
        if (!h.empty() && cost(i) == cost(h.back())) continue;  // kept: the lower KL
        // Going down in cost, KL must rise; a cheaper option that is no worse replaces earlier
        // ones it dominates.
        while (!h.empty() && options[h.back()].kl >= o.kl) h.pop_back();
        // Convexity: the KL added per unit of cost saved must grow along the hull.
        while (h.size() >= 2) {
            const size_t a = h[h.size() - 2], b = h.back();
            const double s1 = (options[b].kl - options[a].kl) / (cost(a) - cost(b));
            const double s2 = (o.kl - options[b].kl) / (cost(b) - cost(i));
            if (s2 > s1) break;
            h.pop_back();
        }
        h.push_back(i);
    }
    return h;
}

}  // namespace

std::vector<Allocation> allocation_hull(const std::vector<TensorSensitivity>& table) {
    std::vector<std::vector<size_t>> hulls;
    std::vector<size_t> at(table.size(), 0);
    Allocation a;
    for (const TensorSensitivity& t : table) {
        SYSLM_CHECK(!t.options.empty(), "allocation: tensor ", t.name, " has no candidate type");
        hulls.push_back(hull(t.options));
        const TypeCost& first = t.options[hulls.back().front()];
        a.types.push_back(first.type);
        a.bytes += first.bytes;
        a.cost += first.goal_cost();
        a.predicted_kl += first.kl;
    }
    // The next step of each tensor, cheapest KL per byte saved first (ties: lower index).
    struct Step {
        double slope;
        size_t tensor;
        bool operator>(const Step& o) const {
            return slope != o.slope ? slope > o.slope : tensor > o.tensor;
        }
    };
    std::priority_queue<Step, std::vector<Step>, std::greater<Step>> steps;
    auto push = [&](size_t i) {
        const std::vector<size_t>& h = hulls[i];
        if (at[i] + 1 >= h.size()) return;
        const TypeCost& cur = table[i].options[h[at[i]]];
        const TypeCost& next = table[i].options[h[at[i] + 1]];
        steps.push({(next.kl - cur.kl) / (cur.goal_cost() - next.goal_cost()), i});
    };
    for (size_t i = 0; i < table.size(); ++i) push(i);
    std::vector<Allocation> out{a};
    while (!steps.empty()) {
        const Step s = steps.top();
        steps.pop();
        const std::vector<size_t>& h = hulls[s.tensor];
        const TypeCost& cur = table[s.tensor].options[h[at[s.tensor]]];
        const TypeCost& next = table[s.tensor].options[h[++at[s.tensor]]];
        a.types[s.tensor] = next.type;
        a.bytes -= cur.bytes - next.bytes;
        a.cost -= cur.goal_cost() - next.goal_cost();
        a.predicted_kl += next.kl - cur.kl;
        out.push_back(a);
        push(s.tensor);
    }
    return out;
}

}  // namespace syslm::tune
