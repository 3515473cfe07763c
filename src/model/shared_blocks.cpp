#include "model/shared_blocks.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/hparams.hpp"

namespace syslm::model {

std::vector<int> shared_blocks(const std::string& spec, int n_layer) {
    const size_t colon = spec.find(':');
    const std::string order = colon == std::string::npos ? "cycle" : spec.substr(colon + 1);
    int unique = 0;
    try {
        size_t end = 0;
        unique = std::stoi(spec.substr(0, colon), &end);
        SYSLM_CHECK(end == std::min(colon, spec.size()), "not a number");
    } catch (const std::exception&) {
        fail("shared blocks '", spec, "': expected a block count, optionally :cycle or :sequence");
    }
    SYSLM_CHECK(order == "cycle" || order == "sequence", "shared blocks '", spec, "': order '",
                order, "' is not cycle or sequence");
    SYSLM_CHECK(1 <= unique && unique <= n_layer, "shared blocks '", spec, "': ", unique,
                " blocks for ", n_layer, " layers");
    std::vector<int> src(static_cast<size_t>(n_layer));
    for (int il = 0; il < n_layer; ++il) {
        if (order == "cycle") {
            src[il] = il % unique;
        } else {  // group g = il * unique / n_layer starts at its first layer
            const int g = static_cast<int>(int64_t{il} * unique / n_layer);
            src[il] = static_cast<int>((int64_t{g} * n_layer + unique - 1) / unique);
        }
    }
    return src;
}

void unshare_blocks(const io::GGUFFile& in, const std::string& out_path) {
    const HParams hp = load_hparams(in);
    SYSLM_CHECK(hp.shares_blocks(), in.path(), ": no ", hp.arch_name,
                ".block_source: its layers do not share blocks");
    io::GGUFWriter w;
    for (const auto& [key, value] : in.metadata())
        if (key != hp.arch_name + ".block_source") w.set(key, value);
    auto layer_of = [](const std::string& name) {
        return name.rfind("blk.", 0) == 0 ? std::stoi(name.substr(4)) : -1;
    };
    for (const io::GGUFTensor& t : in.tensors())  // the blocks in layer order, the rest in place
        if (layer_of(t.name) < 0) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    for (int il = 0; il < hp.n_layer; ++il) {
        const std::string from = "blk." + std::to_string(hp.block_of(il)) + ".";
        const std::string to = "blk." + std::to_string(il) + ".";
        for (const io::GGUFTensor& t : in.tensors())
            if (t.name.rfind(from, 0) == 0)
                w.add_tensor(to + t.name.substr(from.size()), t.type, t.ne, t.data, t.nbytes);
    }
    w.write(out_path);
}

}  // namespace syslm::model
