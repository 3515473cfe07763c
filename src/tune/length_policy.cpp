#include "tune/length_policy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>

#include "compress/perplexity.hpp"
#include "core/error.hpp"

namespace syslm::tune {

const LengthKnob& window_knob() {
    static const LengthKnob k{"window", "attention.window_policy.", "windows", true,
                              [](model::Model& m, double v) { m.set_window(int(v)); }};
    return k;
}

const LengthKnob& experts_knob() {
    static const LengthKnob k{"experts", "expert_policy.", "top_p", false,
                              [](model::Model& m, double v) { m.set_expert_top_p(float(v)); }};
    return k;
}

std::vector<LengthMeasurement> measure_by_length(
    const LengthKnob& knob, const std::string& model_path, const std::vector<int32_t>& tokens,
    int32_t bos, const LengthSearch& search,
    const std::function<void(const LengthMeasurement&)>& on_point) {
    SYSLM_CHECK(!search.lengths.empty() && !search.values.empty(), "tune ", knob.name,
                ": give at least one length and one value");
    std::vector<LengthMeasurement> table;
    {  // One chunk first, untimed: the first forward pays for page faults and kernel choices.
        model::Model m(model_path);
        const int length = search.lengths.front();
        model::Context ctx(m, length, search.threads, length, DType::F32);
        if (tokens.size() >= 2 * static_cast<size_t>(length))
            compress::perplexity(ctx, tokens, length, bos, 1);
    }
    for (const int length : search.lengths) {
        SYSLM_CHECK(tokens.size() >= 2 * static_cast<size_t>(length), "tune ", knob.name,
                    ": the text has ", tokens.size(), " tokens, fewer than two chunks of ", length);
        for (const double value : search.values) {
            model::Model m(model_path);
            knob.apply(m, value);
            model::Context ctx(m, length, search.threads, length, DType::F32);
            const auto t0 = std::chrono::steady_clock::now();
            const compress::PerplexityResult r =
                compress::perplexity(ctx, tokens, length, bos, search.max_chunks);
            const double s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            table.push_back({length, value, r.ppl,
                             static_cast<double>(r.n_chunks) * length / std::max(s, 1e-9),
                             r.n_chunks});
            if (on_point) on_point(table.back());
        }
    }
    return table;
}

std::vector<double> choose_by_length(const LengthKnob& knob,
                                     const std::vector<LengthMeasurement>& table,
                                     const std::vector<int>& lengths, double max_increase) {
    std::vector<double> chosen;
    for (const int length : lengths) {
        double best = INFINITY;
        for (const LengthMeasurement& p : table)
            if (p.length == length) best = std::min(best, p.ppl);
        double value = INFINITY;
        for (const LengthMeasurement& p : table)
            if (p.length == length && p.ppl <= best * (1 + max_increase))
                value = std::min(value, p.value);
        SYSLM_CHECK(std::isfinite(value), "tune ", knob.name, ": no measurement at length ",
                    length);
        chosen.push_back(value);
    }
    return chosen;
}

void write_length_policy(const LengthKnob& knob, const io::GGUFFile& src,
                         const std::vector<int>& lengths, const std::vector<double>& values,
                         const std::string& out) {
    SYSLM_CHECK(lengths.size() == values.size() && !lengths.empty(), "tune ", knob.name,
                ": a policy needs a value for each length");
    const std::string a = src.get_string("general.architecture") + "." + knob.prefix;
    io::GGUFWriter w;
    for (const auto& [key, value] : src.metadata())
        if (!key.starts_with(a)) w.set(key, value);
    w.set(a + "lengths",
          io::GGUFValue::u32s(std::vector<uint32_t>(lengths.begin(), lengths.end())));
    std::vector<io::GGUFValue> v;
    for (const double x : values)
        v.push_back(knob.integer ? io::GGUFValue::u32(static_cast<uint32_t>(x))
                                 : io::GGUFValue::f32(static_cast<float>(x)));
    w.set(a + knob.values_name,
          io::GGUFValue::array(knob.integer ? io::GGUFType::U32 : io::GGUFType::F32, v));
    for (const io::GGUFTensor& t : src.tensors())
        w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    w.write(out);
}

}  // namespace syslm::tune
