// syslm info: what a GGUF file holds (header, metadata, tensors, totals), as text or JSON.
// Reading goes through the validating parser, so a damaged file is reported, not shown.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cli/command.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"

namespace syslm::cli {
namespace {

using io::GGUFFile;
using io::GGUFType;
using io::GGUFValue;
using nlohmann::json;

struct InfoArgs {
    std::string model;
    bool json = false;
    bool tensors = true;
    int max_items = -1;  // -1: 8 for text, all for JSON
};

std::string human_bytes(double n) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (n >= 1024 && u < 4) n /= 1024, ++u;
    char buf[32];
    std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", n, units[u]);
    return buf;
}

std::string type_label(const GGUFValue& v) {
    if (!v.is_array()) return std::string(io::gguf_type_name(v.type()));
    return cat(io::gguf_type_name(v.array_type()), "[", v.size(), "]");
}

std::string shape_label(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += cat(i ? ", " : "", ne[i]);
    return s + "]";
}

// JSON has no NaN or infinity: those become strings, as Python's float() spells them.
json float_json(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return v;
}

// Output goes through stdio's buffer in pieces: a value is never built whole in memory, so an
// array of 10^8 elements costs no more than its view of the mapped file (issue 17).
void emit(std::string_view s) {
    fwrite_unlocked(s.data(), 1, s.size(), stdout);  // one thread writes: no lock per piece
}

// Strings are bytes in GGUF; invalid UTF-8 is shown as U+FFFD rather than refused.
std::string dump(const json& j) {
    return j.dump(2, ' ', false, json::error_handler_t::replace);
}

// `j` laid out as nlohmann::json::dump(2) lays it out inside a document, `indent` spaces deep
// (JSON strings never hold a raw newline, so every newline of the dump starts a line).
void emit_json(const json& j, int indent) {
    const std::string s = dump(j);
    const std::string pad(static_cast<size_t>(indent), ' ');
    size_t start = 0;
    for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) {
        emit(std::string_view(s).substr(start, nl + 1 - start));
        emit(pad);
    }
    emit(std::string_view(s).substr(start));
}

// A metadata value in the same layout, arrays streamed element by element (the first max_items
// of each, or all when max_items is 0).
void emit_value(const GGUFValue& v, size_t max_items, int indent) {
    char buf[32];
    switch (v.type()) {
        case GGUFType::U8:
        case GGUFType::U16:
        case GGUFType::U32:
        case GGUFType::U64:
            emit(std::string_view(buf, std::to_chars(buf, buf + sizeof buf, v.as_u64()).ptr));
            return;
        case GGUFType::I8:
        case GGUFType::I16:
        case GGUFType::I32:
        case GGUFType::I64:
            emit(std::string_view(buf, std::to_chars(buf, buf + sizeof buf, v.as_i64()).ptr));
            return;
        case GGUFType::F32:
        case GGUFType::F64:
            emit(dump(float_json(v.as_f64())));
            return;
        case GGUFType::BOOL:
            emit(v.as_bool() ? "true" : "false");
            return;
        case GGUFType::STRING:
            emit(dump(json(v.as_string_view())));
            return;
        case GGUFType::ARRAY: {
            const size_t n = max_items ? std::min(max_items, v.size()) : v.size();
            if (n == 0) {
                emit("[]");
                return;
            }
            emit("[\n");
            const std::string pad(static_cast<size_t>(indent) + 2, ' ');
            v.for_each_item(
                [&](size_t i, const GGUFValue& item) {
                    if (i) emit(",\n");
                    emit(pad);
                    emit_value(item, max_items, indent + 2);
                },
                n);
            emit("\n");
            emit(std::string(static_cast<size_t>(indent), ' '));
            emit("]");
            return;
        }
    }
    emit("null");
}

struct Totals {
    uint64_t params = 0, bytes = 0;
    std::map<std::string, std::array<uint64_t, 3>> by_type;  // tensors, params, bytes
};

Totals totals_of(const GGUFFile& f) {
    Totals t;
    for (const auto& x : f.tensors()) {
        const auto n = static_cast<uint64_t>(x.numel());
        t.params += n;
        t.bytes += x.nbytes;
        auto& row = t.by_type[std::string(dtype_name(x.type))];
        row[0] += 1;
        row[1] += n;
        row[2] += x.nbytes;
    }
    return t;
}

double bits_per_weight(uint64_t bytes, uint64_t params) {
    return params ? 8.0 * static_cast<double>(bytes) / static_cast<double>(params) : 0.0;
}

// The document is what nlohmann::json::dump(2) would print for it (keys sorted), but metadata
// values are streamed by emit_value instead of being built as one json tree.
void print_json(const GGUFFile& f, const InfoArgs& a) {
    const size_t max_items = a.max_items < 0 ? 0 : static_cast<size_t>(a.max_items);
    json doc;
    doc["file"] = f.path();
    doc["file_size"] = f.file_size();
    doc["version"] = f.version();
    doc["alignment"] = f.alignment();
    doc["data_offset"] = f.data_offset();
    json meta = json::array();  // every field but "value", which sorts last
    for (const auto& [key, v] : f.metadata()) {
        json e = {{"key", key}, {"type", io::gguf_type_name(v.type())}};
        if (v.is_array()) {
            e["array_type"] = io::gguf_type_name(v.array_type());
            e["count"] = v.size();
        }
        meta.push_back(std::move(e));
    }
    doc["metadata"] = json::array();  // the slot the streamed metadata fills, in key order
    if (a.tensors) {
        json ts = json::array();
        for (const auto& t : f.tensors())
            ts.push_back({{"name", t.name},
                          {"type", dtype_name(t.type)},
                          {"shape", t.ne},
                          {"elements", t.numel()},
                          {"offset", t.offset},
                          {"file_offset", f.data_offset() + t.offset},
                          {"bytes", t.nbytes}});
        doc["tensors"] = std::move(ts);
    }
    const Totals tot = totals_of(f);
    json types = json::object();
    for (const auto& [name, row] : tot.by_type)
        types[name] = {{"tensors", row[0]}, {"parameters", row[1]}, {"bytes", row[2]}};
    doc["totals"] = {{"tensors", f.tensors().size()},
                     {"parameters", tot.params},
                     {"bytes", tot.bytes},
                     {"bits_per_weight", bits_per_weight(tot.bytes, tot.params)},
                     {"types", std::move(types)}};

    emit("{\n");
    bool first = true;
    for (auto it = doc.begin(); it != doc.end(); ++it) {
        emit(first ? "  " : ",\n  ");
        first = false;
        emit(dump(json(it.key())));
        emit(": ");
        if (it.key() != "metadata") {
            emit_json(it.value(), 2);
            continue;
        }
        if (meta.empty()) {
            emit("[]");
            continue;
        }
        emit("[\n");
        for (size_t i = 0; i < meta.size(); ++i) {
            emit(i ? ",\n    {\n" : "    {\n");
            for (auto field = meta[i].begin(); field != meta[i].end(); ++field) {
                emit("      ");
                emit(dump(json(field.key())));
                emit(": ");
                emit_json(field.value(), 6);
                emit(",\n");
            }
            emit("      \"value\": ");
            emit_value(f.metadata()[i].second, max_items, 6);
            emit("\n    }");
        }
        emit("\n  ]");
    }
    emit("\n}\n");
}

void print_text(const GGUFFile& f, const InfoArgs& a) {
    const size_t max_items = a.max_items < 0 ? 8 : static_cast<size_t>(a.max_items);
    std::printf("file:       %s\n", f.path().c_str());
    std::printf("size:       %zu bytes (%s)\n", f.file_size(),
                human_bytes(static_cast<double>(f.file_size())).c_str());
    std::printf("version:    %u\n", f.version());
    std::printf("alignment:  %zu\n", f.alignment());
    std::printf("metadata:   %zu keys\n", f.metadata().size());
    size_t key_w = 0, type_w = 0;
    for (const auto& [key, v] : f.metadata()) {
        key_w = std::max(key_w, std::min<size_t>(key.size(), 48));
        type_w = std::max(type_w, type_label(v).size());
    }
    for (const auto& [key, v] : f.metadata()) {
        std::printf("  %-*s  %-*s  ", static_cast<int>(key_w), key.c_str(),
                    static_cast<int>(type_w), type_label(v).c_str());
        v.write_display(emit, max_items);  // streamed: --max-items 0 may show 10^8 elements
        emit("\n");
    }

    std::printf("tensors:    %zu (data at byte %zu)\n", f.tensors().size(), f.data_offset());
    if (a.tensors && !f.tensors().empty()) {
        size_t name_w = 4, shape_w = 5;
        for (const auto& t : f.tensors()) {
            name_w = std::max(name_w, t.name.size());
            shape_w = std::max(shape_w, shape_label(t.ne).size());
        }
        std::printf("  %-*s  %-5s  %-*s  %14s  %14s  %12s\n", static_cast<int>(name_w), "name",
                    "type", static_cast<int>(shape_w), "shape", "elements", "bytes", "offset");
        for (const auto& t : f.tensors())
            std::printf("  %-*s  %-5s  %-*s  %14lld  %14zu  %12llu\n", static_cast<int>(name_w),
                        t.name.c_str(), std::string(dtype_name(t.type)).c_str(),
                        static_cast<int>(shape_w), shape_label(t.ne).c_str(),
                        static_cast<long long>(t.numel()), t.nbytes,
                        static_cast<unsigned long long>(t.offset));
        std::printf(
            "  (shape in GGML order: innermost dimension first; offset from the data "
            "section)\n");
    }
    const Totals tot = totals_of(f);
    if (!tot.by_type.empty()) std::printf("by type:\n");
    for (const auto& [name, row] : tot.by_type)
        std::printf("  %-5s  %6llu tensors  %14llu elements  %s\n", name.c_str(),
                    static_cast<unsigned long long>(row[0]),
                    static_cast<unsigned long long>(row[1]),
                    human_bytes(static_cast<double>(row[2])).c_str());
    std::printf("totals:     %llu parameters, %llu bytes (%s), %.3f bits per weight\n",
                static_cast<unsigned long long>(tot.params),
                static_cast<unsigned long long>(tot.bytes),
                human_bytes(static_cast<double>(tot.bytes)).c_str(),
                bits_per_weight(tot.bytes, tot.params));
}

int run_info(const InfoArgs& a) {
    const GGUFFile f(a.model);  // validates everything; errors name the file and offset
    if (a.json) {
        print_json(f, a);
    } else {
        print_text(f, a);
    }
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<InfoArgs>();
    app.footer(
        "Reads and validates a GGUF file (v2 or v3) and prints its version, alignment, every "
        "metadata key with its type and value (long arrays abbreviated), the tensor table (name, "
        "type, shape in GGML order, elements, bytes, offset) and totals (parameters, bytes, bits "
        "per weight). A malformed file gives one error naming the problem and byte offset, and "
        "exit code 1.\n"
        "--json prints one JSON document: {file, file_size, version, alignment, data_offset, "
        "metadata: [{key, type, [array_type, count], value}], tensors: [{name, type, shape, "
        "elements, offset, file_offset, bytes}], totals: {tensors, parameters, bytes, "
        "bits_per_weight, types}}. Non-finite floats are written as the strings \"nan\", \"inf\", "
        "\"-inf\"; invalid UTF-8 in strings as U+FFFD.\n");
    app.add_option("-m,--model", a->model, "GGUF file")->required();
    app.add_flag("--json", a->json, "Print one JSON document instead of text");
    app.add_flag("--tensors,!--no-tensors", a->tensors, "List every tensor (default) or not");
    app.add_option("--max-items", a->max_items,
                   "Array elements shown per key, 0 = all (default: 8 in text, all in JSON)")
        ->check(CLI::NonNegativeNumber);
    return [a] { return run_info(*a); };
}

}  // namespace

SYSLM_COMMAND(info, "info", "Show the metadata, tensors and sizes of a GGUF file", setup);

}  // namespace syslm::cli
