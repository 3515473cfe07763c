// Safetensors: the weight format of Hugging Face checkpoints. Spec:
// https://github.com/huggingface/safetensors#format
//
// File layout: u64 little-endian N -> N bytes of JSON header -> data. The header maps each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section);
// an optional "__metadata__" entry maps strings to strings. Shapes are in PyTorch order
// (outermost first), the opposite of GGML's ne[].
//
// Files are mmap'd and tensors are zero-copy views; construction validates the whole header so
// that a corrupt file gives one Error naming the file and what is wrong, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.hpp"

namespace syslm::io {

// Element types of the spec. Only F32/F16/BF16 (and F64) can be converted to float.
enum class STDType {
    BOOL,
    U8,
    I8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F16,
    BF16,
    F32,
    F64,
    F8_E4M3,
    F8_E5M2
};
std::string_view st_dtype_name(STDType t);
size_t st_dtype_size(STDType t);

struct STTensor {
    std::string name;
    STDType dtype = STDType::F32;
    std::vector<int64_t> shape;         // PyTorch order, outermost first; empty for a scalar
    std::span<const uint8_t> data;      // view into the mapped file (may be unaligned)
    const std::string* file = nullptr;  // path of the file holding it, for messages

    int64_t numel() const;
    std::string shape_str() const;  // "[4096, 11008]"
};

class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::string& path);  // mmaps and validates
    // Parses bytes owned by the caller (tests); `name` is used in error messages.
    SafetensorsFile(std::span<const uint8_t> bytes, std::string name);
    SafetensorsFile(const SafetensorsFile&) = delete;  // tensors point at path_
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    const std::vector<STTensor>& tensors() const { return tensors_; }  // in data-offset order
    const STTensor* find(std::string_view name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

private:
    void parse();

    std::string path_;
    std::unique_ptr<MappedFile> map_;
    std::span<const uint8_t> bytes_;
    std::vector<STTensor> tensors_;
    std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
    std::map<std::string, std::string> metadata_;
};

// Every tensor of a Hugging Face model folder: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json` (whose weight_map must agree exactly with the shards' contents),
// or, without an index, every `model*.safetensors` in the folder.
class SafetensorsModel {
public:
    explicit SafetensorsModel(const std::string& dir);

    const std::vector<std::string>& names() const { return names_; }  // sorted
    const STTensor* find(std::string_view name) const;
    const STTensor& tensor(std::string_view name) const;  // throws naming the folder and tensor
    const std::vector<std::string>& files() const { return files_; }

private:
    std::string dir_;
    std::vector<std::string> files_;
    std::vector<std::unique_ptr<SafetensorsFile>> shards_;
    std::map<std::string, const STTensor*, std::less<>> by_name_;
    std::vector<std::string> names_;
};

// Reads the elements of an F32/F16/BF16/F64 tensor as float32 (bit-exact widening for F16/BF16).
// Other dtypes throw an Error naming the tensor and its file.
std::vector<float> st_to_f32(const STTensor& t);

}  // namespace syslm::io
