#include "grammar/grammar.hpp"

#include <algorithm>
#include <atomic>

#include "core/error.hpp"

namespace syslm::grammar {

bool Grammar::admits(uint32_t pos, uint32_t cp) const {
    return admits_any(pos, cp, cp);
}

bool Grammar::admits_any(uint32_t pos, uint32_t lo, uint32_t hi) const {
    const Element& e = elements[pos];
    if (!e.negated) {
        for (uint32_t i = e.first; i < e.first + e.count; ++i)
            if (ranges[i].first <= hi && lo <= ranges[i].second) return true;
        return false;
    }
    // Some code point of [lo, hi] outside every range: walk up from lo past the ranges that
    // cover it (ranges are sorted and merged by the builder).
    uint32_t c = lo;
    for (uint32_t i = e.first; i < e.first + e.count && c <= hi; ++i) {
        if (ranges[i].second < c) continue;
        if (ranges[i].first > c) return true;
        if (ranges[i].second == 0x10FFFF) return false;
        c = ranges[i].second + 1;
    }
    return c <= hi;
}

uint32_t GrammarBuilder::rule(const std::string& name) {
    for (uint32_t i = 0; i < g_.names.size(); ++i)
        if (g_.names[i] == name) return i;
    g_.names.push_back(name);
    alts_.emplace_back();
    defined_.push_back(false);
    return static_cast<uint32_t>(g_.names.size() - 1);
}

uint32_t GrammarBuilder::fresh_rule(const std::string& base) {
    for (int i = 1;; ++i) {
        const std::string name = base + "_" + std::to_string(i);
        if (std::find(g_.names.begin(), g_.names.end(), name) == g_.names.end()) return rule(name);
    }
}

void GrammarBuilder::define(uint32_t r, const std::vector<std::vector<Element>>& alternatives) {
    SYSLM_CHECK(!defined_[r], "grammar: rule '", g_.names[r], "' is defined twice");
    alts_[r] = alternatives;
    defined_[r] = true;
}

Element GrammarBuilder::chars(const std::vector<std::pair<uint32_t, uint32_t>>& ranges,
                              bool negated) {
    std::vector<std::pair<uint32_t, uint32_t>> r = ranges;
    for (auto& [lo, hi] : r)
        if (lo > hi) std::swap(lo, hi);
    std::sort(r.begin(), r.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& x : r) {
        if (!merged.empty() && x.first <= merged.back().second + 1)
            merged.back().second = std::max(merged.back().second, x.second);
        else
            merged.push_back(x);
    }
    Element e{Element::Chars, negated, 0, static_cast<uint32_t>(g_.ranges.size()),
              static_cast<uint32_t>(merged.size())};
    g_.ranges.insert(g_.ranges.end(), merged.begin(), merged.end());
    return e;
}

Grammar GrammarBuilder::finish(const std::string& root) {
    const size_t n = g_.names.size();
    const auto it = std::find(g_.names.begin(), g_.names.end(), root);
    SYSLM_CHECK(it != g_.names.end() && defined_[it - g_.names.begin()], "grammar: no rule '", root,
                "' to start from");
    g_.root = static_cast<uint32_t>(it - g_.names.begin());
    for (size_t r = 0; r < n; ++r)
        for (const auto& alt : alts_[r])
            for (const Element& e : alt)
                if (e.kind == Element::Ref)
                    SYSLM_CHECK(e.ref < n && defined_[e.ref], "grammar: rule '", g_.names[r],
                                "' uses rule '", e.ref < n ? g_.names[e.ref] : "?",
                                "', which is not defined");
    // Nullable rules (they may match nothing), then the rules each can reach without consuming
    // a code point: a cycle there is left recursion.
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; ++r) {
            if (nullable[r]) continue;
            for (const auto& alt : alts_[r])
                if (std::all_of(alt.begin(), alt.end(), [&](const Element& e) {
                        return e.kind == Element::Ref && nullable[e.ref];
                    })) {
                    nullable[r] = changed = true;
                    break;
                }
        }
    }
    std::vector<std::vector<uint32_t>> leftmost(n);
    for (size_t r = 0; r < n; ++r)
        for (const auto& alt : alts_[r])
            for (const Element& e : alt) {
                if (e.kind != Element::Ref) break;
                leftmost[r].push_back(e.ref);
                if (!nullable[e.ref]) break;
            }
    std::vector<int> color(n, 0);  // 0 unseen, 1 on the path, 2 done
    const auto visit = [&](auto&& self, uint32_t r) -> void {
        color[r] = 1;
        for (uint32_t s : leftmost[r]) {
            SYSLM_CHECK(color[s] != 1, "grammar: rule '", g_.names[s],
                        "' is left-recursive (it can reach itself before matching anything)");
            if (color[s] == 0) self(self, s);
        }
        color[r] = 2;
    };
    for (uint32_t r = 0; r < n; ++r)
        if (color[r] == 0) visit(visit, r);
    static std::atomic<uint64_t> ids{0};
    g_.id = ++ids;
    g_.rules.assign(n, {});
    for (size_t r = 0; r < n; ++r)
        for (const auto& alt : alts_[r]) {
            g_.rules[r].push_back(static_cast<uint32_t>(g_.elements.size()));
            g_.elements.insert(g_.elements.end(), alt.begin(), alt.end());
            g_.elements.push_back(Element{});
        }
    return std::move(g_);
}

std::vector<Element> repeat(GrammarBuilder& b, const std::string& base,
                            const std::vector<Element>& item, int min, int max) {
    SYSLM_CHECK(min >= 0 && (max < 0 || max >= min), "grammar: repetition {", min, ",", max,
                "} of rule '", base, "' is empty or reversed");
    std::vector<Element> out;
    for (int i = 0; i < min; ++i) out.insert(out.end(), item.begin(), item.end());
    if (max < 0) {  // R ::= item R | (nothing)
        const uint32_t r = b.fresh_rule(base);
        std::vector<Element> again = item;
        again.push_back(GrammarBuilder::ref(r));
        b.define(r, {again, {}});
        out.push_back(GrammarBuilder::ref(r));
    } else if (max > min) {  // R_1 ::= item R_2 | (nothing), ..., R_k ::= item | (nothing)
        uint32_t next = 0;
        for (int k = max - min; k >= 1; --k) {
            const uint32_t r = b.fresh_rule(base);
            std::vector<Element> alt = item;
            if (k < max - min) alt.push_back(GrammarBuilder::ref(next));
            b.define(r, {alt, {}});
            next = r;
        }
        out.push_back(GrammarBuilder::ref(next));
    }
    return out;
}

}  // namespace syslm::grammar
