#include "io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/half.hpp"

namespace syslm::io {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeader = 100'000'000;

struct DTypeRow {
    STDType type;
    std::string_view name;
    size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {STDType::BOOL, "BOOL", 1}, {STDType::U8, "U8", 1},           {STDType::I8, "I8", 1},
    {STDType::I16, "I16", 2},   {STDType::U16, "U16", 2},         {STDType::I32, "I32", 4},
    {STDType::U32, "U32", 4},   {STDType::I64, "I64", 8},         {STDType::U64, "U64", 8},
    {STDType::F16, "F16", 2},   {STDType::BF16, "BF16", 2},       {STDType::F32, "F32", 4},
    {STDType::F64, "F64", 8},   {STDType::F8_E4M3, "F8_E4M3", 1}, {STDType::F8_E5M2, "F8_E5M2", 1},
};

const DTypeRow* find_dtype(std::string_view name) {
    for (const auto& r : kDTypes)
        if (r.name == name) return &r;
    return nullptr;
}

uint64_t read_u64_le(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

// A non-negative integer JSON value, or an Error naming `what`.
uint64_t json_uint(const json& v, const std::string& where, const char* what) {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0)
        return static_cast<uint64_t>(v.get<int64_t>());
    fail(where, ": ", what, " must be a non-negative integer, found ", v.dump());
}

std::string read_text_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) fail(p.string(), ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

std::string_view st_dtype_name(STDType t) {
    for (const auto& r : kDTypes)
        if (r.type == t) return r.name;
    return "?";
}

size_t st_dtype_size(STDType t) {
    for (const auto& r : kDTypes)
        if (r.type == t) return r.size;
    return 0;
}

int64_t STTensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string STTensor::shape_str() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
    return s + "]";
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), map_(std::make_unique<MappedFile>(path)), bytes_(map_->bytes()) {
    parse();
}

SafetensorsFile::SafetensorsFile(std::span<const uint8_t> bytes, std::string name)
    : path_(std::move(name)), bytes_(bytes) {
    parse();
}

const STTensor* SafetensorsFile::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

// The header's JSON object; nlohmann keeps the last of duplicate keys silently, so a callback
// sees every key first and a duplicate tensor name is an error.
json parse_header(const std::string& f, const char* hdr, uint64_t n) {
    std::set<std::string> seen;
    std::string duplicate;
    auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (ev == json::parse_event_t::key && depth == 1) {
            const auto& k = parsed.get_ref<const std::string&>();
            if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
        }
        return true;
    };
    json header;
    try {
        header = json::parse(hdr, hdr + n, cb);
    } catch (const json::exception& e) {
        fail(f, ": header is not valid JSON: ", e.what());
    }
    SYSLM_CHECK(header.is_object(), f, ": header must be a JSON object, found ",
                header.type_name());
    SYSLM_CHECK(duplicate.empty(), f, ": duplicate tensor name '", duplicate, "' in the header");
    return header;
}

// One tensor's header entry, checked against the data section (data, data_size bytes).
STTensor parse_entry(const std::string& name, const json& entry, const std::string& where,
                     const uint8_t* data, uint64_t data_size) {
    SYSLM_CHECK(entry.is_object(), where, ": entry must be an object");
    SYSLM_CHECK(entry.contains("dtype") && entry["dtype"].is_string(), where,
                ": missing or non-string \"dtype\"");
    const std::string dt = entry["dtype"].get<std::string>();
    const DTypeRow* row = find_dtype(dt);
    SYSLM_CHECK(row, where, ": unknown dtype '", dt, "'");
    SYSLM_CHECK(entry.contains("shape") && entry["shape"].is_array(), where,
                ": missing or non-array \"shape\"");
    SYSLM_CHECK(entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                    entry["data_offsets"].size() == 2,
                where, ": \"data_offsets\" must be an array [begin, end]");
    STTensor t;
    t.name = name;
    t.dtype = row->type;
    uint64_t numel = 1;
    for (const auto& d : entry["shape"]) {
        const uint64_t dim = json_uint(d, where, "shape entry");
        SYSLM_CHECK(!__builtin_mul_overflow(numel, dim, &numel) && numel < (uint64_t{1} << 62),
                    where, ": shape ", entry["shape"].dump(), " overflows");
        t.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t begin = json_uint(entry["data_offsets"][0], where, "data_offsets[0]");
    const uint64_t end = json_uint(entry["data_offsets"][1], where, "data_offsets[1]");
    SYSLM_CHECK(begin <= end, where, ": data_offsets [", begin, ", ", end, "] are reversed");
    SYSLM_CHECK(end <= data_size, where, ": data_offsets [", begin, ", ", end,
                "] lie beyond the data section of ", data_size, " bytes");
    uint64_t nbytes = 0;
    SYSLM_CHECK(!__builtin_mul_overflow(numel, uint64_t{row->size}, &nbytes), where,
                ": byte size overflows");
    SYSLM_CHECK(end - begin == nbytes, where, ": data_offsets [", begin, ", ", end, "] hold ",
                end - begin, " bytes but ", dt, " ", t.shape_str(), " needs ", nbytes);
    t.data = {data + begin, static_cast<size_t>(nbytes)};
    return t;
}

// Tensors may not share bytes (the spec also forbids holes; they are tolerated). Sorts them by
// where their bytes start.
void check_no_overlap(std::vector<STTensor>& tensors, const uint8_t* data, const std::string& f) {
    std::sort(tensors.begin(), tensors.end(), [&](const STTensor& a, const STTensor& b) {
        return a.data.data() != b.data.data() ? a.data.data() < b.data.data()
                                              : a.data.size() < b.data.size();
    });
    for (size_t i = 1; i < tensors.size(); ++i) {
        const STTensor& a = tensors[i - 1];
        const STTensor& b = tensors[i];
        SYSLM_CHECK(
            a.data.data() + a.data.size() <= b.data.data() || a.data.empty() || b.data.empty(), f,
            ": tensors '", a.name, "' and '", b.name, "' overlap (bytes [", a.data.data() - data,
            ", ", a.data.data() - data + a.data.size(), ") and [", b.data.data() - data, ", ",
            b.data.data() - data + b.data.size(), "))");
    }
}

}  // namespace

void SafetensorsFile::parse() {
    const std::string& f = path_;
    SYSLM_CHECK(bytes_.size() >= 8, f, ": not a safetensors file: ", bytes_.size(),
                " bytes, shorter than the 8-byte header length");
    const uint64_t n = read_u64_le(bytes_.data());
    SYSLM_CHECK(n <= bytes_.size() - 8, f, ": header length ", n,
                " runs past the end of the file (", bytes_.size(), " bytes)");
    SYSLM_CHECK(n <= kMaxHeader, f, ": header length ", n, " exceeds the 100 MB limit");
    SYSLM_CHECK(n >= 2, f, ": header length ", n, " is too short for a JSON object");
    const uint64_t data_size = bytes_.size() - 8 - n;
    const uint8_t* data = bytes_.data() + 8 + n;
    const json header = parse_header(f, reinterpret_cast<const char*>(bytes_.data() + 8), n);
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            SYSLM_CHECK(entry.is_object() || entry.is_null(), f,
                        ": __metadata__ must be an object of strings");
            if (entry.is_object())
                for (const auto& [k, v] : entry.items()) {
                    SYSLM_CHECK(v.is_string(), f, ": __metadata__ value of '", k,
                                "' is not a string");
                    metadata_[k] = v.get<std::string>();
                }
            continue;
        }
        tensors_.push_back(parse_entry(name, entry, f + ": tensor '" + name + "'", data, data_size));
        tensors_.back().file = &path_;
    }
    check_no_overlap(tensors_, data, f);
    for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

SafetensorsModel::SafetensorsModel(const std::string& dir) : dir_(dir) {
    const fs::path root(dir);
    SYSLM_CHECK(fs::is_directory(root), dir, ": not a directory");
    const fs::path index_path = root / "model.safetensors.index.json";
    std::map<std::string, std::string> weight_map;  // tensor -> shard file name
    if (fs::exists(index_path)) {
        json idx;
        try {
            idx = json::parse(read_text_file(index_path));
        } catch (const json::exception& e) {
            fail(index_path.string(), ": not valid JSON: ", e.what());
        }
        SYSLM_CHECK(idx.is_object() && idx.contains("weight_map") && idx["weight_map"].is_object(),
                    index_path.string(), ": missing \"weight_map\" object");
        std::set<std::string> shard_names;
        for (const auto& [name, file] : idx["weight_map"].items()) {
            SYSLM_CHECK(file.is_string(), index_path.string(), ": weight_map entry '", name,
                        "' is not a file name");
            const std::string fname = file.get<std::string>();
            SYSLM_CHECK(fname.find('/') == std::string::npos && fname != ".." && !fname.empty(),
                        index_path.string(), ": shard name '", fname,
                        "' must be a plain file name");
            weight_map[name] = fname;
            shard_names.insert(fname);
        }
        for (const auto& s : shard_names) {
            SYSLM_CHECK(fs::exists(root / s), index_path.string(), ": shard '", s,
                        "' listed in weight_map is missing");
            files_.push_back((root / s).string());
        }
    } else if (fs::exists(root / "model.safetensors")) {
        files_.push_back((root / "model.safetensors").string());
    } else {
        for (const auto& e : fs::directory_iterator(root)) {
            const std::string fn = e.path().filename().string();
            if (fn.starts_with("model") && fn.ends_with(".safetensors") && e.is_regular_file())
                files_.push_back(e.path().string());
        }
        std::sort(files_.begin(), files_.end());
        SYSLM_CHECK(!files_.empty(), dir,
                    ": no model.safetensors or model.safetensors.index.json (PyTorch .bin "
                    "checkpoints are not supported; re-save with safe_serialization=True)");
    }

    for (const auto& path : files_) {
        shards_.push_back(std::make_unique<SafetensorsFile>(path));
        const std::string base = fs::path(path).filename().string();
        for (const auto& t : shards_.back()->tensors()) {
            auto [it, inserted] = by_name_.emplace(t.name, &t);
            SYSLM_CHECK(inserted, dir, ": tensor '", t.name, "' appears in both ",
                        *it->second->file, " and ", path);
            if (!weight_map.empty()) {
                auto w = weight_map.find(t.name);
                SYSLM_CHECK(w != weight_map.end(), path, ": tensor '", t.name,
                            "' is not listed in model.safetensors.index.json");
                SYSLM_CHECK(w->second == base, path, ": tensor '", t.name,
                            "' is listed in model.safetensors.index.json under shard ", w->second);
            }
        }
    }
    for (const auto& [name, file] : weight_map)
        SYSLM_CHECK(by_name_.count(name), (root / file).string(), ": tensor '", name,
                    "' listed in model.safetensors.index.json is missing from the shard");
    for (const auto& [name, t] : by_name_) names_.push_back(name);
}

const STTensor* SafetensorsModel::find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
}

const STTensor& SafetensorsModel::tensor(std::string_view name) const {
    const STTensor* t = find(name);
    if (!t) fail(dir_, ": missing tensor '", name, "'");
    return *t;
}

std::vector<float> st_to_f32(const STTensor& t) {
    const size_t n = static_cast<size_t>(t.numel());
    std::vector<float> out(n);
    const uint8_t* p = t.data.data();
    switch (t.dtype) {
        case STDType::F32:
            std::memcpy(out.data(), p, n * 4);
            break;
        case STDType::F16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = f16_to_f32(h);
            }
            break;
        case STDType::BF16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = bf16_to_f32(h);
            }
            break;
        case STDType::F64:
            for (size_t i = 0; i < n; ++i) {
                double d;
                std::memcpy(&d, p + 8 * i, 8);
                out[i] = static_cast<float>(d);
            }
            break;
        default:
            fail(t.file ? *t.file : std::string("<memory>"), ": tensor '", t.name, "' has dtype ",
                 st_dtype_name(t.dtype), "; only F32, F16, BF16 and F64 can be converted");
    }
    return out;
}

}  // namespace syslm::io
