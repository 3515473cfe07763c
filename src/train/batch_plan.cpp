#include "train/batch_plan.hpp"

#include <cctype>
#include <cmath>

#include "core/error.hpp"

namespace syslm::train {

size_t training_memory_bytes(TrainModel& model, OptimizerKind optimizer, int B, int T) {
    const size_t params = model.params().size() * sizeof(float);
    const size_t moments = optimizer == OptimizerKind::AdamW ? 2 : 1;
    const size_t scratch = static_cast<size_t>(B) * T * model.hparams().n_vocab * sizeof(float);
    return params * (2 + moments) + model.activation_bytes(B, T) + scratch;
}

BatchPlan plan_batches(TrainModel& model, OptimizerKind optimizer, int T, int sequences,
                       size_t memory_limit) {
    SYSLM_CHECK(sequences >= 1 && T >= 1, "batch plan: ", sequences, " sequences of ", T,
                " tokens");
    for (int B = sequences; B >= 1; --B) {
        if (sequences % B != 0) continue;
        const size_t bytes = training_memory_bytes(model, optimizer, B, T);
        if (memory_limit == 0 || bytes <= memory_limit) return {B, sequences / B, bytes};
    }
    fail("training: one sequence of ", T, " tokens needs about ",
         training_memory_bytes(model, optimizer, 1, T) >> 20, " MiB, over the memory limit of ",
         memory_limit >> 20, " MiB (try --recompute full, a shorter --seq or a larger limit)");
}

size_t parse_memory_size(const std::string& text) {
    size_t i = 0;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
        ++i;
    std::string unit = text.substr(i);
    double value = 0;
    try {
        size_t used = 0;
        value = i > 0 ? std::stod(text.substr(0, i), &used) : -1;
        if (used != i) value = -1;  // "1.2.3"
    } catch (const std::exception&) {
        value = -1;
    }
    double mult = -1;
    if (unit.empty() || unit == "B") mult = 1;
    else if (unit == "K" || unit == "KiB") mult = 1024.0;
    else if (unit == "M" || unit == "MiB") mult = 1024.0 * 1024;
    else if (unit == "G" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
    else if (unit == "KB") mult = 1e3;  // a device's "2 GB" is decimal
    else if (unit == "MB") mult = 1e6;
    else if (unit == "GB") mult = 1e9;
    SYSLM_CHECK(value > 0 && mult > 0 && std::isfinite(value * mult), "memory size '", text,
                "': expected a positive number with an optional unit B, KiB, MiB, GiB, KB, MB "
                "or GB");
    return static_cast<size_t>(value * mult);
}

}  // namespace syslm::train
