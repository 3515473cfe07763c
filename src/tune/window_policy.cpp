#include "tune/window_policy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>

#include "compress/perplexity.hpp"
#include "core/error.hpp"
#include "model/transformer.hpp"

namespace syslm::tune {

std::vector<WindowMeasurement> measure_windows(
    const std::string& model_path, const std::vector<int32_t>& tokens, int32_t bos,
    const WindowSearch& search, const std::function<void(const WindowMeasurement&)>& on_point) {
    SYSLM_CHECK(!search.lengths.empty() && !search.windows.empty(),
                "tune window: give at least one length and one window");
    std::vector<WindowMeasurement> table;
    {  // One chunk first, untimed: the first forward pays for page faults and kernel choices.
        model::Model m(model_path);
        const int length = search.lengths.front();
        model::Context ctx(m, length, search.threads, length, DType::F32);
        if (tokens.size() >= 2 * static_cast<size_t>(length))
            compress::perplexity(ctx, tokens, length, bos, 1);
    }
    for (const int length : search.lengths) {
        SYSLM_CHECK(tokens.size() >= 2 * static_cast<size_t>(length), "tune window: the text has ",
                    tokens.size(), " tokens, fewer than two chunks of ", length);
        for (const int window : search.windows) {
            model::Model m(model_path);
            m.set_window(window);
            model::Context ctx(m, length, search.threads, length, DType::F32);
            const auto t0 = std::chrono::steady_clock::now();
            const compress::PerplexityResult r =
                compress::perplexity(ctx, tokens, length, bos, search.max_chunks);
            const double s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            table.push_back({length, window, r.ppl,
                             static_cast<double>(r.n_chunks) * length / std::max(s, 1e-9),
                             r.n_chunks});
            if (on_point) on_point(table.back());
        }
    }
    return table;
}

std::vector<int> choose_windows(const std::vector<WindowMeasurement>& table,
                                const std::vector<int>& lengths, double max_increase) {
    std::vector<int> chosen;
    for (const int length : lengths) {
        double best = INFINITY;
        for (const WindowMeasurement& p : table)
            if (p.length == length) best = std::min(best, p.ppl);
        int window = 0;
        for (const WindowMeasurement& p : table)
            if (p.length == length && p.ppl <= best * (1 + max_increase) &&
                (window == 0 || p.window < window))
                window = p.window;
        SYSLM_CHECK(window > 0, "tune window: no measurement at length ", length);
        chosen.push_back(window);
    }
    return chosen;
}

void write_window_policy(const io::GGUFFile& src, const std::vector<int>& lengths,
                         const std::vector<int>& windows, const std::string& out) {
    SYSLM_CHECK(lengths.size() == windows.size() && !lengths.empty(),
                "tune window: a policy needs a window for each length");
    const std::string a = src.get_string("general.architecture") + ".attention.window_policy.";
    io::GGUFWriter w;
    for (const auto& [key, value] : src.metadata())
        if (!key.starts_with(a)) w.set(key, value);
    const std::vector<uint32_t> l(lengths.begin(), lengths.end()),
        v(windows.begin(), windows.end());
    w.set(a + "lengths", io::GGUFValue::u32s(l));
    w.set(a + "windows", io::GGUFValue::u32s(v));
    for (const io::GGUFTensor& t : src.tensors())
        w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    w.write(out);
}

}  // namespace syslm::tune
