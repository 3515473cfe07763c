// What an augmentation did to one document: edits at byte offsets of the original, so that a
// copy can be traced back and checked (data augment writes them to augment.jsonl).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace syslm::curate {

struct Edit {
    size_t at = 0;         // byte offset in the original
    std::string from, to;  // original bytes there, and what replaces them
};

// The original with `edits` (sorted by `at`, not overlapping) applied.
inline std::string apply_edits(std::string_view original, const std::vector<Edit>& edits) {
    std::string out;
    out.reserve(original.size());
    size_t pos = 0;
    for (const Edit& e : edits) {
        out.append(original.substr(pos, e.at - pos));
        out += e.to;
        pos = e.at + e.from.size();
    }
    out.append(original.substr(pos));
    return out;
}

}  // namespace syslm::curate
